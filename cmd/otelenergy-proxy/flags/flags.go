// Package flags is otelenergy-proxy's command line: every flag, its
// environment equivalent, its default and its check, and the one place
// where flags become values. It depends on the standard library,
// internal/cli and internal/carbonconf (the carbon flags, shared with the
// agent) only, so that tests elsewhere (the deployment manifests') can
// parse a container's arguments exactly as the proxy does. The logging
// and version flags take their names, defaults and checks from
// internal/cli, which the agent shares.
package flags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otelenergy/otelenergy/internal/carbonconf"
	"github.com/otelenergy/otelenergy/internal/cli"
	"github.com/otelenergy/otelenergy/internal/sourcekind"
)

// EnvPrefix begins the environment variable of every flag: -admin-listen
// is OTELENERGY_ADMIN_LISTEN. A flag on the command line wins over its
// variable.
const EnvPrefix = "OTELENERGY_"

// Defaults of the flags that deployment files depend on. The ports are
// apart from the demo backend's :8080, the backends' usual :8000, and the
// agent's admin :8090, so that all of them run side by side on one host.
const (
	DefaultListen      = ":8088"
	DefaultAdminListen = ":8089"
	DefaultBackend     = "http://127.0.0.1:8000"
	// HealthPath and ReadyPath are served on the admin address.
	HealthPath = "/healthz"
	ReadyPath  = "/readyz"
)

// Config is the parsed command line.
type Config struct {
	Listen           string        // -listen: the proxied OpenAI-compatible API
	AdminListen      string        // -admin-listen: /healthz and /readyz
	Backend          *url.URL      // -backend
	BackendHealth    string        // -backend-health: path polled for readiness
	BackendTimeout   time.Duration // -backend-timeout: wait for response headers
	Devices          []string      // -devices
	Sources          []string      // -sources' accelerators; nil is auto
	Host             bool          // -sources names rapl: requests get the host's CPU and DRAM share
	BackendPIDs      []int         // -backend-pid
	Simulate         bool          // -simulate
	ShutdownDelay    time.Duration // -shutdown-delay
	DrainTimeout     time.Duration // -drain-timeout
	Horizon          time.Duration // -horizon
	BaggageKeys      []string      // -baggage-keys
	BaggageValues    int           // -baggage-values
	LogFormat        string        // -log-format: text or json
	LogLevel         string        // -log-level
	LogRequests      bool          // -log-requests
	Trailers         bool          // -trailers: true or final
	TrailersFinal    bool          // -trailers=final: wait for the final figure
	FinalWait        time.Duration // -final-wait: how long -trailers=final waits
	IncludeUsage     bool          // -include-usage
	UpstreamStream   bool          // -upstream-stream
	MaxRequestBytes  int64         // -max-request-bytes
	MaxResponseBytes int64         // -max-response-bytes
	MaxBufferedBytes int64         // -max-buffered-bytes
	CopyTo           string        // -copy-to: copy the binary there and exit
	Version          bool          // -version: print the build and exit
	// Carbon is the carbon flags (-carbon-intensity, -pue, ...): see
	// package internal/carbonconf.
	Carbon carbonconf.Config
	// Command is the backend to run as a child (wrapper mode): the
	// arguments after "--". Empty in front of a running backend.
	Command []string
}

// maxBaggageKeys is otelenergy.MaxBaggageKeys; this package depends on
// the standard library only.
const maxBaggageKeys = 8

// ErrHelp is returned by Parse for -h or -help; the usage was written.
var ErrHelp = flag.ErrHelp

// ErrInvalid wraps every invalid flag or variable value; its message
// names the flag (and the variable, when the value came from one).
var ErrInvalid = cli.ErrInvalid

var table = cli.Table[Config]{Program: "otelenergy-proxy", EnvPrefix: EnvPrefix, Flags: append([]cli.Flag[Config]{
	{Name: "listen", Default: DefaultListen, Usage: "address the proxied OpenAI-compatible API listens on (HTTP/1.1 and unencrypted HTTP/2); a port alone, :8088, is every interface (a Service in front); 127.0.0.1:8088 is loopback only (a sidecar)",
		Set: func(c *Config, v string) error { c.Listen = v; return checkAddr(v) }},
	{Name: "admin-listen", Default: DefaultAdminListen, Usage: "address of " + HealthPath + " (alive) and " + ReadyPath + " (first energy sample taken and the backend answers); a port alone is every interface, which the kubelet's probes need",
		Set: func(c *Config, v string) error { c.AdminListen = v; return checkAddr(v) }},
	{Name: "backend", Default: DefaultBackend, Usage: "URL of the OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp server, Ollama)",
		Set: func(c *Config, v string) error {
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return errors.New("want an http:// or https:// URL such as http://127.0.0.1:8000")
			}
			c.Backend = u
			return nil
		}},
	{Name: "backend-health", Default: "/v1/models", Usage: "path on the backend that readiness polls: any answer below 500 means the backend serves (a loading server answers 503 or nothing)",
		Set: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "/") {
				return errors.New("want a path beginning with /")
			}
			c.BackendHealth = v
			return nil
		}},
	{Name: "backend-timeout", Default: "10m", Usage: "how long to wait for the backend's response headers (queueing and prefill included) before answering 504",
		Set: func(c *Config, v string) error { return positive(&c.BackendTimeout, v) }},
	{Name: "sources", Default: sourcekind.Auto, Usage: "the energy sources: auto (the accelerator: nvml, then amdsmi, then intel), or a comma-separated list of nvml, amdsmi and intel, tried in that order, and rapl, which also meters the host's CPU packages and DRAM and gives each request its share of them, by the backend's CPU time (energy.cpu.millijoules, energy.memory.millijoules; needs the backend's pids and read access to energy_uj); each source tried logs one line",
		Set: func(c *Config, v string) error {
			ks, err := sourcekind.Parse(v)
			if err != nil {
				return errors.New("want auto, or a comma-separated list of nvml, amdsmi, intel and rapl, each once")
			}
			c.Host = slices.Contains(ks, sourcekind.RAPL)
			c.Sources = slices.DeleteFunc(ks, func(k string) bool { return k == sourcekind.RAPL })
			if len(c.Sources) == 0 {
				c.Sources = nil // rapl alone: the accelerator is auto's
			}
			return nil
		}},
	{Name: "devices", Usage: "GPUs to meter: comma-separated NVML indices, GPU- or MIG- UUIDs (default: those CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES name); NVML only: AMD SMI and Intel hwmon, which meter every board, refuse it; with -simulate, one simulated GPU per entry",
		Set: func(c *Config, v string) error { c.Devices = cli.List(v); return nil }},
	{Name: "backend-pid", Usage: "comma-separated host pids of the backend's processes, whose share of a GPU other processes use is attributed (default: in wrapper mode the child's process tree; else the tree of the process listening on -backend's port, when one of this host is found)",
		Set: func(c *Config, v string) error {
			c.BackendPIDs = nil
			for _, s := range cli.List(v) {
				p, err := strconv.Atoi(s)
				if err != nil || p <= 0 {
					return fmt.Errorf("%q is not a pid", s)
				}
				c.BackendPIDs = append(c.BackendPIDs, p)
			}
			return nil
		}},
	{Name: "simulate", Default: "false", Bool: true, Usage: "meter a simulated GPU instead of NVML (the resource says otelenergy.source=simulated); without it, a host without NVML is an error",
		Set: func(c *Config, v string) error { return cli.Bool(&c.Simulate, v) }},
	{Name: "shutdown-delay", Default: "5s", Usage: "on SIGTERM or SIGINT, how long to keep serving new requests after " + ReadyPath + " turns 503, while load balancers and Kubernetes endpoints stop routing here; a second signal ends it",
		Set: func(c *Config, v string) error { return nonNegative(&c.ShutdownDelay, v) }},
	{Name: "drain-timeout", Default: "25s", Usage: "on SIGTERM or SIGINT, how long in-flight requests may take to finish before they are cut",
		Set: func(c *Config, v string) error { return positive(&c.DrainTimeout, v) }},
	{Name: "horizon", Default: "10s", Usage: "the ledger's horizon: how long a request's exact energy may take to become final (and how long shutdown waits for it)",
		Set: func(c *Config, v string) error { return positive(&c.Horizon, v) }},
	{Name: "baggage-keys", Usage: "comma-separated W3C baggage keys (such as tenant) copied onto the span and the otelenergy.request.energy histogram",
		Set: func(c *Config, v string) error {
			c.BaggageKeys = cli.List(v)
			if len(c.BaggageKeys) > maxBaggageKeys {
				return fmt.Errorf("%d keys, at most %d", len(c.BaggageKeys), maxBaggageKeys)
			}
			for _, k := range c.BaggageKeys {
				if strings.ContainsAny(k, " =;\"") {
					return fmt.Errorf("%q is not a baggage key", k)
				}
			}
			return nil
		}},
	{Name: "baggage-values", Default: "100", Usage: "distinct values kept per baggage key; later ones are recorded as _other",
		Set: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return errors.New("want a whole number of at least 1")
			}
			c.BaggageValues = n
			return nil
		}},
	{Name: cli.FormatFlag, Default: cli.DefaultFormat, Usage: cli.FormatUsage,
		Set: func(c *Config, v string) error { c.LogFormat = v; return cli.CheckFormat(v) }},
	{Name: cli.LevelFlag, Default: cli.DefaultLevel, Usage: cli.LevelUsage,
		Set: func(c *Config, v string) error { c.LogLevel = v; return cli.CheckLevel(v) }},
	{Name: "log-requests", Default: "false", Bool: true, Usage: "log one line per proxied completion, with its tokens and energy",
		Set: func(c *Config, v string) error { return cli.Bool(&c.LogRequests, v) }},
	{Name: "trailers", Default: "true", Bool: true, Usage: "end each completion's response with the HTTP trailers Energy-Millijoules and Energy-Approximate: true sends the estimate as the response ends, final holds the trailers (never the body) up to -final-wait for the final figure, the span's, false sends none",
		Set: func(c *Config, v string) error {
			if v == "final" {
				c.Trailers, c.TrailersFinal = true, true
				return nil
			}
			c.TrailersFinal = false
			if cli.Bool(&c.Trailers, v) != nil {
				return errors.New("want true, false or final")
			}
			return nil
		}},
	{Name: "final-wait", Default: "500ms", Usage: "with -trailers=final, how long after the body the trailers wait for the final figure; past it they carry the estimate with Energy-Approximate: true",
		Set: func(c *Config, v string) error { return positive(&c.FinalWait, v) }},
	{Name: "include-usage", Default: "true", Bool: true, Usage: "ask the backend for usage on streams that do not (stream_options.include_usage), and remove that chunk from the response",
		Set: func(c *Config, v string) error { return cli.Bool(&c.IncludeUsage, v) }},
	{Name: "upstream-stream", Default: "true", Bool: true, Usage: "send a non-streaming completion request upstream as a stream (stream and stream_options.include_usage set), so that its tokens are timed as they are generated, and answer the client with the whole body rebuilt from the chunks, as the backend would have returned it; a stream that fails gets 502 or 504, never part of a body",
		Set: func(c *Config, v string) error { return cli.Bool(&c.UpstreamStream, v) }},
	{Name: "max-request-bytes", Default: "16777216", Usage: "largest request body accepted, in bytes; a larger one gets 413 before any byte of it reaches the backend",
		Set: func(c *Config, v string) error { return bytesValue(&c.MaxRequestBytes, v) }},
	{Name: "max-response-bytes", Default: "16777216", Usage: "largest response body the proxy rebuilds from an upstream stream (-upstream-stream), in bytes; a larger one gets 502 (at most -max-buffered-bytes is used)",
		Set: func(c *Config, v string) error { return bytesValue(&c.MaxResponseBytes, v) }},
	{Name: "max-buffered-bytes", Default: "67108864", Usage: "request and response body bytes held in memory across all requests at once (request bodies are held whole, to bound them and read their model; responses rebuilt from an upstream stream, and non-streaming responses read for their usage); a request that would pass it gets 503 with Retry-After",
		Set: func(c *Config, v string) error { return bytesValue(&c.MaxBufferedBytes, v) }},
	{Name: cli.VersionFlag, Default: "false", Bool: true, Usage: cli.VersionUsage,
		Set: func(c *Config, v string) error { return cli.Bool(&c.Version, v) }},
	{Name: "copy-to", Usage: "copy this binary to the given path and exit: an init container puts it into a backend's image this way (the image has no shell)",
		Set: func(c *Config, v string) error { c.CopyTo = v; return nil }},
}, carbonconf.Flags(func(c *Config) *carbonconf.Config { return &c.Carbon })...)}

// Names returns every flag's name, in -h order.
func Names() []string { return table.Names() }

// Env returns the environment variable of flag name.
func Env(name string) string { return table.Env(name) }

// Parse parses args (without the program name) over the environment read
// through getenv. The arguments after "--" are the child command. It
// returns [ErrHelp] after writing the usage to out for -h, and an error
// wrapping [ErrInvalid], one line naming the flag, for a bad value.
func Parse(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var c Config
	// An empty variable is unset here, as the proxy has always read them.
	lookup := func(k string) (string, bool) { v := getenv(k); return v, v != "" }
	rest, err := table.Parse(&c, args, lookup)
	switch {
	case errors.Is(err, flag.ErrHelp):
		Usage(out)
		return c, ErrHelp
	case err != nil:
		return c, err
	}
	c.Command = rest
	if len(c.Command) > 0 && !dashDash(args, len(c.Command)) {
		return c, cli.Invalid(fmt.Sprintf("unexpected argument %q (a backend command goes after --)", c.Command[0]))
	}
	if len(c.Command) == 0 && dashDash(args, 0) {
		return c, cli.Invalid("-- is followed by no command: name the backend to run after it, or drop -- to proxy a running backend")
	}
	if err := c.Carbon.Check(getenv); err != nil {
		return c, err
	}
	if err := c.Carbon.CheckFiles(); err != nil {
		return c, err
	}
	if c.MaxRequestBytes > c.MaxBufferedBytes {
		return c, cli.Invalid(fmt.Sprintf("-max-request-bytes %d is above -max-buffered-bytes %d: no such request could be held", c.MaxRequestBytes, c.MaxBufferedBytes))
	}
	return c, nil
}

// dashDash reports whether the last n arguments follow a "--".
func dashDash(args []string, n int) bool {
	i := len(args) - n - 1
	return i >= 0 && args[i] == "--"
}

// Usage writes the command line's documentation: every flag with its
// variable and default.
func Usage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  otelenergy-proxy [flags]                      in front of a running backend (-backend)
  otelenergy-proxy [flags] -- COMMAND [ARGS]    wrapper: run the backend as a child, for
                                                example -- vllm serve MODEL --port 8000

A reverse proxy for OpenAI-compatible servers that puts each completion's GPU
energy on its span (energy.millijoules), on the otelenergy.request.energy
histogram and in HTTP trailers. Telemetry is configured by the standard OTEL_*
variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER, ...); with none
set, nothing is exported. Each flag can be set by its environment variable; a
flag on the command line wins.

Flags:
`)
	table.WriteFlags(w)
}

func checkAddr(v string) error {
	if _, _, err := net.SplitHostPort(v); err != nil {
		return errors.New("want host:port, such as :8080 or 127.0.0.1:8080")
	}
	return nil
}

func positive(d *time.Duration, v string) error {
	x, err := time.ParseDuration(v)
	if err != nil || x <= 0 {
		return errors.New("want a positive duration such as 30s")
	}
	*d = x
	return nil
}

func nonNegative(d *time.Duration, v string) error {
	x, err := time.ParseDuration(v)
	if err != nil || x < 0 {
		return errors.New("want a duration of 0 or more such as 5s")
	}
	*d = x
	return nil
}

func bytesValue(n *int64, v string) error {
	x, err := strconv.ParseInt(v, 10, 64)
	if err != nil || x < 1 {
		return errors.New("want a whole number of bytes of at least 1")
	}
	*n = x
	return nil
}
