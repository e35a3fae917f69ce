package flags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otelenergy/otelenergy/internal/carbonconf"
	"github.com/otelenergy/otelenergy/internal/cli"
	"github.com/otelenergy/otelenergy/internal/sourcekind"
)

// EnvPrefix begins the environment variable of every flag: -admin-listen
// is OTELENERGY_ADMIN_LISTEN.
const EnvPrefix = "OTELENERGY_"

// Defaults that deployment files and other packages depend on.
const (
	// DefaultAdminListen is -admin-listen's default. It differs from the
	// proxy's API and admin ports, so that both run on one host.
	DefaultAdminListen = ":8090"
	// DefaultMaxSeries is -max-series's default, and the agent's cap when
	// its Config leaves MaxSeries zero.
	DefaultMaxSeries = 4096
	// DefaultProcessInterval and DefaultSampleInterval are
	// -process-interval's and -sample-interval's defaults; the latter is
	// the library's DefaultInterval.
	DefaultProcessInterval = time.Second
	DefaultSampleInterval  = 17 * time.Millisecond
	// DefaultSampleHold is -sample-hold's default, the agent's
	// (attrib.DefaultHold).
	DefaultSampleHold = 2 * time.Second
	// HealthPath and ReadyPath are served on the admin address.
	HealthPath = "/healthz"
	ReadyPath  = "/readyz"
	// DoctorCommand, as the first argument, runs the node checks instead
	// of the agent; the arguments after it are the checks' own.
	DoctorCommand = "doctor"
)

// Config is the parsed command line.
type Config struct {
	Simulate        bool          // -simulate
	SimulateDevices int           // -simulate-devices
	Devices         []string      // -devices
	Sources         []string      // -sources; nil is auto
	SysRoot         string        // -sys-root
	ProcRoot        string        // -proc-root
	ProcessInterval time.Duration // -process-interval
	SampleInterval  time.Duration // -sample-interval
	MaxSeries       int           // -max-series
	IdleWatts       float64       // -idle-watts
	// SampleHold is -sample-hold, as agent.Config.SampleHold takes it:
	// a hold of 0s on the command line is -1 here (wait for nothing).
	SampleHold  time.Duration
	LogFormat   string        // -log-format: text or json
	LogLevel    string        // -log-level
	AdminListen string        // -admin-listen; "" disables it
	Duration    time.Duration // -duration; 0 runs until a signal
	Version     bool          // -version: print the build and exit
	// Carbon is the carbon flags (-carbon-intensity, -pue, ...): see
	// package internal/carbonconf.
	Carbon carbonconf.Config
}

// ErrHelp is returned by [Parse] for -h or -help; the usage was written.
var ErrHelp = flag.ErrHelp

// ErrInvalid wraps every invalid flag or variable value and every stray
// argument.
var ErrInvalid = cli.ErrInvalid

var table = cli.Table[Config]{Program: "otelenergy-agent", EnvPrefix: EnvPrefix, Flags: append([]cli.Flag[Config]{
	{Name: "simulate", Default: "false", Bool: true, Usage: "meter simulated GPUs (eight H100-like boards, the last in MIG mode) and a simulated host's CPU packages and DRAM, running scripted processes, instead of NVML and RAPL; never chosen silently",
		Set: func(c *Config, v string) error { return cli.Bool(&c.Simulate, v) }},
	{Name: "simulate-devices", Default: "8", Usage: "number of simulated GPUs with -simulate, 1 to 64",
		Set: func(c *Config, v string) error { return intIn(&c.SimulateDevices, v, 1, 64) }},
	{Name: "devices", Usage: "GPUs to meter: comma-separated NVML indices, GPU- or MIG- UUIDs; empty meters every GPU NVML shows, narrowed by CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES; NVML only: AMD SMI and Intel hwmon refuse it",
		Set: func(c *Config, v string) error { c.Devices = cli.List(v); return nil }},
	{Name: "sources", Default: sourcekind.Auto, Usage: "energy sources: auto, or a comma-separated list of nvml, amdsmi, intel (i915 and xe hwmon) and rapl (the host's CPU packages and DRAM); the first accelerator listed that finds a readable GPU is metered, and rapl adds the host. auto tries nvml, amdsmi, intel, and adds rapl when it is readable. Each source tried logs one line: what it found, or why not",
		Set: func(c *Config, v string) error {
			ks, err := sourcekind.Parse(v)
			if err != nil {
				return errors.New("want auto, or a comma-separated list of nvml, amdsmi, intel and rapl, each once")
			}
			c.Sources = ks
			return nil
		}},
	{Name: "sys-root", Default: "/sys", Usage: "where the host's /sys is mounted, for RAPL and Intel hwmon",
		Set: func(c *Config, v string) error {
			if v == "" {
				return errors.New("want a directory")
			}
			c.SysRoot = v
			return nil
		}},
	{Name: "proc-root", Default: "/proc", Usage: "where the host's /proc is mounted; the agent must share the host's PID namespace",
		Set: func(c *Config, v string) error {
			if v == "" {
				return errors.New("want a directory")
			}
			c.ProcRoot = v
			return nil
		}},
	{Name: "process-interval", Default: DefaultProcessInterval.String(), Usage: "how often each board's processes and SM utilization are read and its energy split; at least 100ms",
		Set: func(c *Config, v string) error { return durationAtLeast(&c.ProcessInterval, v, 100*time.Millisecond) }},
	{Name: "sample-interval", Default: DefaultSampleInterval.String(), Usage: "how often the energy counters are read, faster than they step; above 5ms",
		Set: func(c *Config, v string) error { return durationAtLeast(&c.SampleInterval, v, 5*time.Millisecond+1) }},
	{Name: "max-series", Default: strconv.Itoa(DefaultMaxSeries), Usage: "most per-process series held at once; processes beyond go to the overflow series and are counted",
		Set: func(c *Config, v string) error { return intIn(&c.MaxSeries, v, 1, math.MaxInt32) }},
	{Name: "idle-watts", Default: "0", Usage: "fixed static power per board in W; 0 learns it per board",
		Set: func(c *Config, v string) error {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
				return errors.New("want 0 or more watts")
			}
			c.IdleWatts = x
			return nil
		}},
	{Name: "sample-hold", Default: DefaultSampleHold.String(), Usage: "how long a counter interval waits for the utilization samples that cover it (NVML lists them some 100s of ms late) before it is split without them, 0s to 1m; 0s waits for none. hw.energy trails the counter by up to this",
		Set: func(c *Config, v string) error {
			x, err := time.ParseDuration(v)
			if err != nil || x < 0 || x > time.Minute {
				return errors.New("want a duration from 0s to 1m, such as 2s")
			}
			c.SampleHold = x
			if x == 0 {
				c.SampleHold = -1
			}
			return nil
		}},
	{Name: cli.FormatFlag, Default: cli.DefaultFormat, Usage: cli.FormatUsage,
		Set: func(c *Config, v string) error { c.LogFormat = v; return cli.CheckFormat(v) }},
	{Name: cli.LevelFlag, Default: cli.DefaultLevel, Usage: cli.LevelUsage,
		Set: func(c *Config, v string) error { c.LogLevel = v; return cli.CheckLevel(v) }},
	{Name: cli.VersionFlag, Default: "false", Bool: true, Usage: cli.VersionUsage,
		Set: func(c *Config, v string) error { return cli.Bool(&c.Version, v) }},
	{Name: "admin-listen", Default: DefaultAdminListen, Usage: "address of " + HealthPath + " (alive) and " + ReadyPath + " (a pass done, some GPU not lost, not shutting down); a port alone is every interface, 127.0.0.1:8090 loopback only; empty disables",
		Set: func(c *Config, v string) error {
			if v != "" {
				if _, _, err := net.SplitHostPort(v); err != nil {
					return errors.New("want host:port, such as :8090 or 127.0.0.1:8090, or empty")
				}
			}
			c.AdminListen = v
			return nil
		}},
	{Name: "duration", Default: "0s", Usage: "exit after this long; 0 runs until SIGTERM or SIGINT",
		Set: func(c *Config, v string) error { return durationAtLeast(&c.Duration, v, 0) }},
}, carbonconf.Flags(func(c *Config) *carbonconf.Config { return &c.Carbon })...)}

// Names returns every flag's name, in -h order.
func Names() []string { return table.Names() }

// Env returns the environment variable of flag name.
func Env(name string) string { return table.Env(name) }

// Parse parses args (without the program name) over the environment read
// through lookupEnv; a variable set to "" is a value like any other. It
// returns [ErrHelp] after writing the usage to out for -h, and an error
// wrapping [ErrInvalid], one line naming the flag, for a bad value or a
// stray argument. -devices with -simulate is invalid: it chooses NVML
// GPUs.
func Parse(args []string, lookupEnv func(string) (string, bool), out io.Writer) (Config, error) {
	var c Config
	rest, err := table.Parse(&c, args, lookupEnv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		Usage(out)
		return c, ErrHelp
	case err != nil:
		return c, err
	}
	if len(rest) > 0 {
		return c, cli.Invalid(fmt.Sprintf("unexpected argument %q", rest[0]))
	}
	if err := c.Carbon.Check(func(k string) string { v, _ := lookupEnv(k); return v }); err != nil {
		return c, err
	}
	if err := c.Carbon.CheckFiles(); err != nil {
		return c, err
	}
	if c.Simulate && c.Sources != nil {
		return c, cli.Invalid(fmt.Sprintf("invalid value %q for -sources: with -simulate the GPUs are simulated; leave -sources at auto", strings.Join(c.Sources, ",")))
	}
	if c.Sources != nil && !slices.ContainsFunc(c.Sources, func(k string) bool { return k != sourcekind.RAPL }) {
		return c, cli.Invalid("invalid value \"rapl\" for -sources: the agent splits a GPU's energy and needs an accelerator beside rapl, such as nvml,rapl")
	}
	if c.Simulate && len(c.Devices) > 0 {
		return c, cli.Invalid(fmt.Sprintf("invalid value %q for -devices: it chooses NVML GPUs; with -simulate, -simulate-devices sets their number", strings.Join(c.Devices, ",")))
	}
	return c, nil
}

// Usage writes the command line's documentation: every flag with its
// variable and default.
func Usage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  otelenergy-agent [flags]           meter every GPU process of this node
  otelenergy-agent doctor [flags]    check this node first (otelenergy-agent doctor -h)

Splits each GPU's energy among its processes and exports
otelenergy.process.energy, otelenergy.energy.idle,
otelenergy.energy.unattributed and hw.energy through the standard OTEL_*
variables (OTEL_METRICS_EXPORTER=otlp|prometheus|console|none,
OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_PROMETHEUS_HOST, ...). Each flag
can be set by its environment variable; a flag on the command line wins.

Flags:
`)
	table.WriteFlags(w)
}

func intIn(n *int, v string, lo, hi int) error {
	x, err := strconv.Atoi(v)
	if err != nil || x < lo || x > hi {
		return fmt.Errorf("want a whole number from %d to %d", lo, hi)
	}
	*n = x
	return nil
}

func durationAtLeast(d *time.Duration, v string, least time.Duration) error {
	x, err := time.ParseDuration(v)
	if err != nil || x < least {
		return fmt.Errorf("want a duration of at least %v, such as 1s", least)
	}
	*d = x
	return nil
}
