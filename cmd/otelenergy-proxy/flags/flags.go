// Package flags is otelenergy-proxy's command line: every flag, its
// environment equivalent, its default and its check, and the one place
// where flags become values. It depends on the standard library and
// internal/cli only, so that tests elsewhere (the deployment manifests')
// can parse a container's arguments exactly as the proxy does. The logging
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
	"strconv"
	"strings"
	"time"

	"github.com/otelenergy/otelenergy/internal/cli"
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
	MaxRequestBytes  int64         // -max-request-bytes
	MaxBufferedBytes int64         // -max-buffered-bytes
	CopyTo           string        // -copy-to: copy the binary there and exit
	Version          bool          // -version: print the build and exit
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
var ErrInvalid = errors.New("invalid value")

type spec struct {
	name, usage string
	def         string
	bool        bool
	check       func(c *Config, v string) error
}

func (s spec) env() string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}

var specs = []spec{
	{name: "listen", def: DefaultListen, usage: "address the proxied OpenAI-compatible API listens on (HTTP/1.1 and unencrypted HTTP/2)",
		check: func(c *Config, v string) error { c.Listen = v; return checkAddr(v) }},
	{name: "admin-listen", def: DefaultAdminListen, usage: "address of " + HealthPath + " (alive) and " + ReadyPath + " (first energy sample taken and the backend answers)",
		check: func(c *Config, v string) error { c.AdminListen = v; return checkAddr(v) }},
	{name: "backend", def: DefaultBackend, usage: "URL of the OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp server, Ollama)",
		check: func(c *Config, v string) error {
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return errors.New("want an http:// or https:// URL such as http://127.0.0.1:8000")
			}
			c.Backend = u
			return nil
		}},
	{name: "backend-health", def: "/v1/models", usage: "path on the backend that readiness polls: any answer below 500 means the backend serves (a loading server answers 503 or nothing)",
		check: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "/") {
				return errors.New("want a path beginning with /")
			}
			c.BackendHealth = v
			return nil
		}},
	{name: "backend-timeout", def: "10m", usage: "how long to wait for the backend's response headers (queueing and prefill included) before answering 504",
		check: func(c *Config, v string) error { return positive(&c.BackendTimeout, v) }},
	{name: "devices", usage: "GPUs to meter: comma-separated NVML indices, GPU- or MIG- UUIDs (default: those CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES name); with -simulate, one simulated GPU per entry",
		check: func(c *Config, v string) error { c.Devices = list(v); return nil }},
	{name: "backend-pid", usage: "comma-separated host pids of the backend's processes, whose share of a GPU other processes use is attributed (default: in wrapper mode the child's process tree; else the tree of the process listening on -backend's port, when one of this host is found)",
		check: func(c *Config, v string) error {
			c.BackendPIDs = nil
			for _, s := range list(v) {
				p, err := strconv.Atoi(s)
				if err != nil || p <= 0 {
					return fmt.Errorf("%q is not a pid", s)
				}
				c.BackendPIDs = append(c.BackendPIDs, p)
			}
			return nil
		}},
	{name: "simulate", def: "false", bool: true, usage: "meter a simulated GPU instead of NVML (the resource says otelenergy.source=simulated); without it, a host without NVML is an error",
		check: func(c *Config, v string) error { return boolean(&c.Simulate, v) }},
	{name: "shutdown-delay", def: "5s", usage: "on SIGTERM or SIGINT, how long to keep serving new requests after " + ReadyPath + " turns 503, while load balancers and Kubernetes endpoints stop routing here; a second signal ends it",
		check: func(c *Config, v string) error { return nonNegative(&c.ShutdownDelay, v) }},
	{name: "drain-timeout", def: "25s", usage: "on SIGTERM or SIGINT, how long in-flight requests may take to finish before they are cut",
		check: func(c *Config, v string) error { return positive(&c.DrainTimeout, v) }},
	{name: "horizon", def: "10s", usage: "the ledger's horizon: how long a request's exact energy may take to become final (and how long shutdown waits for it)",
		check: func(c *Config, v string) error { return positive(&c.Horizon, v) }},
	{name: "baggage-keys", usage: "comma-separated W3C baggage keys (such as tenant) copied onto the span and the otelenergy.request.energy histogram",
		check: func(c *Config, v string) error {
			c.BaggageKeys = list(v)
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
	{name: "baggage-values", def: "100", usage: "distinct values kept per baggage key; later ones are recorded as _other",
		check: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return errors.New("want a whole number of at least 1")
			}
			c.BaggageValues = n
			return nil
		}},
	{name: cli.FormatFlag, def: cli.DefaultFormat, usage: cli.FormatUsage,
		check: func(c *Config, v string) error { c.LogFormat = v; return cli.CheckFormat(v) }},
	{name: cli.LevelFlag, def: cli.DefaultLevel, usage: cli.LevelUsage,
		check: func(c *Config, v string) error { c.LogLevel = v; return cli.CheckLevel(v) }},
	{name: "log-requests", def: "false", bool: true, usage: "log one line per proxied completion, with its tokens and energy",
		check: func(c *Config, v string) error { return boolean(&c.LogRequests, v) }},
	{name: "trailers", def: "true", bool: true, usage: "end each completion's response with the HTTP trailers Energy-Millijoules and Energy-Approximate: true sends the estimate as the response ends, final holds the trailers (never the body) up to -final-wait for the final figure, the span's, false sends none",
		check: func(c *Config, v string) error {
			if v == "final" {
				c.Trailers, c.TrailersFinal = true, true
				return nil
			}
			c.TrailersFinal = false
			if boolean(&c.Trailers, v) != nil {
				return errors.New("want true, false or final")
			}
			return nil
		}},
	{name: "final-wait", def: "500ms", usage: "with -trailers=final, how long after the body the trailers wait for the final figure; past it they carry the estimate with Energy-Approximate: true",
		check: func(c *Config, v string) error { return positive(&c.FinalWait, v) }},
	{name: "include-usage", def: "true", bool: true, usage: "ask the backend for usage on streams that do not (stream_options.include_usage), and remove that chunk from the response",
		check: func(c *Config, v string) error { return boolean(&c.IncludeUsage, v) }},
	{name: "max-request-bytes", def: "16777216", usage: "largest request body accepted, in bytes; a larger one gets 413 before any byte of it reaches the backend",
		check: func(c *Config, v string) error { return bytesValue(&c.MaxRequestBytes, v) }},
	{name: "max-buffered-bytes", def: "67108864", usage: "request body bytes held in memory across all requests at once (each body is held whole, to bound it and read its model); a request that would pass it gets 503 with Retry-After",
		check: func(c *Config, v string) error { return bytesValue(&c.MaxBufferedBytes, v) }},
	{name: cli.VersionFlag, def: "false", bool: true, usage: cli.VersionUsage,
		check: func(c *Config, v string) error { return boolean(&c.Version, v) }},
	{name: "copy-to", usage: "copy this binary to the given path and exit: an init container puts it into a backend's image this way (the image has no shell)",
		check: func(c *Config, v string) error { c.CopyTo = v; return nil }},
}

// Names returns every flag's name, in -h order.
func Names() []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.name
	}
	return out
}

// Env returns the environment variable of flag name.
func Env(name string) string { return spec{name: name}.env() }

// value adapts a spec to flag.Value.
type value struct {
	s   *spec
	c   *Config
	cur string
}

func (v *value) String() string { return v.cur }
func (v *value) Set(s string) error {
	if err := v.s.check(v.c, s); err != nil {
		return err
	}
	v.cur = s
	return nil
}
func (v *value) IsBoolFlag() bool { return v.s.bool }

// Parse parses args (without the program name) over the environment read
// through getenv. The arguments after "--" are the child command. It
// returns [ErrHelp] after writing the usage to out for -h, and an error
// wrapping [ErrInvalid], one line naming the flag, for a bad value.
func Parse(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("otelenergy-proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for i := range specs {
		s := &specs[i]
		v := &value{s: s, c: &c}
		if err := v.Set(s.def); err != nil && s.def != "" {
			panic(fmt.Sprintf("flags: default of -%s: %v", s.name, err)) // a bug in this table
		} else if s.def == "" {
			v.cur = ""
		}
		if e := getenv(s.env()); e != "" {
			if err := v.Set(e); err != nil {
				return c, invalid(fmt.Sprintf("invalid value %q for %s (-%s): %v", e, s.env(), s.name, err))
			}
		}
		fs.Var(v, s.name, s.usage)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			Usage(out)
			return c, ErrHelp
		}
		return c, invalid(err.Error())
	}
	c.Command = fs.Args()
	if len(c.Command) > 0 && !dashDash(args, len(c.Command)) {
		return c, invalid(fmt.Sprintf("unexpected argument %q (a backend command goes after --)", c.Command[0]))
	}
	if len(c.Command) == 0 && dashDash(args, 0) {
		return c, invalid("-- is followed by no command: name the backend to run after it, or drop -- to proxy a running backend")
	}
	if c.MaxRequestBytes > c.MaxBufferedBytes {
		return c, invalid(fmt.Sprintf("-max-request-bytes %d is above -max-buffered-bytes %d: no such request could be held", c.MaxRequestBytes, c.MaxBufferedBytes))
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
	for _, s := range specs {
		arg := " value"
		if s.bool {
			arg = ""
		}
		def := s.def
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  -%s%s\n    \t%s\n    \t(default %s; env %s)\n", s.name, arg, s.usage, def, s.env())
	}
}

func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
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

func boolean(b *bool, v string) error {
	x, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true or false")
	}
	*b = x
	return nil
}

// invalidError is a one-line message that matches [ErrInvalid].
type invalidError string

func invalid(msg string) error { return invalidError(msg) }

func (e invalidError) Error() string        { return string(e) }
func (e invalidError) Is(target error) bool { return target == ErrInvalid }
