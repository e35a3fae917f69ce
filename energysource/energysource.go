package energysource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/otelenergy/otelenergy/internal/amdsmi"
	"github.com/otelenergy/otelenergy/internal/intelgpu"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/rapl"
	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/internal/sourcekind"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// Kinds of source, as [otelenergy.Source]'s Kind returns them and the
// otelenergy.source resource attribute shows them.
const (
	NVML       = "nvml"
	AMDSMI     = amdsmi.Kind
	IntelHwmon = intelgpu.Kind
	RAPL       = rapl.Kind
)

// ErrUnknownKind reports a kind this package does not know.
var ErrUnknownKind = sourcekind.ErrUnknown

// Option configures [Accelerator], [Host] and [Open].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	sysfs   string
	devices []string
	pids    []int
	set     ProcessSet
	domains []string
	kinds   []string
	log     *slog.Logger
	amdLib  amdsmi.Lib    // tests
	raplOpt []rapl.Option // tests
	amdOpts []amdsmi.Option
}

// WithSysfs sets where sysfs is mounted, for RAPL and Intel hwmon. The
// default is "/sys".
func WithSysfs(root string) Option { return optionFunc(func(c *config) { c.sysfs = root }) }

// WithDevices names the NVIDIA GPUs NVML meters, as
// [otelenergy.WithDevices] does: NVML indices, GPU- UUIDs, unique UUID
// prefixes or MIG- UUIDs. The default is the GPUs this process can use.
// The other accelerator sources meter every board they find, so with
// devices named they refuse to open, with an error wrapping
// [otelenergy.ErrNotSupported], rather than meter boards that were not
// asked for.
func WithDevices(ids ...string) Option {
	return optionFunc(func(c *config) { c.devices = append([]string(nil), ids...) })
}

// WithProcesses names the processes whose work is attributed, by host
// pid, with their descendants. NVML and AMD SMI split a shared board by
// the processes' use of it; the default is this process. RAPL splits each
// zone by their share of the node's CPU time, as Kepler does; by default
// it charges every zone whole.
func WithProcesses(pids ...int) Option {
	return optionFunc(func(c *config) { c.pids = append([]int(nil), pids...) })
}

// ProcessSet is a set of processes whose members change as processes
// start and exit, such as a server's process tree.
type ProcessSet interface {
	// AppendPIDs appends the set's members, host pids as they stand at
	// the call, each once, to dst and returns the extended slice. It is
	// called from the sources' own goroutines, never on a request path,
	// and must be safe for concurrent use.
	AppendPIDs(dst []int) []int
}

// WithProcessSet adds the members of set to the processes of
// [WithProcesses]. NVML attributes them as they stand at each of its
// process listings (every 5 s), so that a server's runner started at its
// first request, or again after an idle unload, is attributed from the
// first listing that sees it. AMD SMI and RAPL take the set's members
// once, when they open. The default is no set; with one, the default of
// this process alone does not apply to NVML.
func WithProcessSet(set ProcessSet) Option {
	return optionFunc(func(c *config) { c.set = set })
}

// WithRAPLDomains chooses the RAPL domains: "package", "core", "uncore",
// "dram", "psys". The default is package and dram; overlapping choices
// fail (see [Host]).
func WithRAPLDomains(domains ...string) Option {
	return optionFunc(func(c *config) { c.domains = append([]string(nil), domains...) })
}

// WithKinds chooses the accelerator sources [Accelerator] tries, in order.
// The default is NVML, AMD SMI, Intel hwmon.
func WithKinds(kinds ...string) Option {
	return optionFunc(func(c *config) { c.kinds = append([]string(nil), kinds...) })
}

// WithLogger logs one line per source tried: at Info what it found and
// left out, at Warn why it could not be used. The default logs nothing.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.log = l }) }

func newConfig(opts []Option) config {
	c := config{sysfs: "/sys", kinds: []string{NVML, AMDSMI, IntelHwmon}}
	for _, o := range opts {
		o.apply(&c)
	}
	return c
}

// Auto is the choice of sources that [ParseKinds] reads as "try each
// known one".
const Auto = sourcekind.Auto

// ErrBadChoice reports a choice of sources [ParseKinds] cannot read.
var ErrBadChoice = sourcekind.ErrBadChoice

// ParseKinds reads a choice of sources as a command line gives it: "auto"
// (nil: every known source, in the default order), or a comma-separated
// list of kinds, each at most once, where "intel" is [IntelHwmon]. It
// fails with an error wrapping [ErrBadChoice] and, for a kind it does not
// know, [ErrUnknownKind].
func ParseKinds(s string) ([]string, error) { return sourcekind.Parse(s) }

// Finding says what one source found.
type Finding struct {
	// Kind is the source's kind.
	Kind string
	// Devices are the devices it reads; empty when Err is set.
	Devices []otelenergy.Device
	// Skipped are the devices it found and left out, with the reason for
	// each.
	Skipped []otelenergy.Skipped
	// Err says why the source cannot be used, or is nil.
	Err error
}

// String is the finding in one line.
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.Kind)
	b.WriteString(": ")
	if f.Err != nil {
		b.WriteString("unusable: ")
		b.WriteString(f.Err.Error())
		return b.String()
	}
	fmt.Fprintf(&b, "%d device(s)", len(f.Devices))
	for i, d := range f.Devices {
		sep := " ["
		if i > 0 {
			sep = ", "
		}
		fmt.Fprintf(&b, "%s%s %s (%s)", sep, d.HWType(), d.ID, d.Name)
	}
	if len(f.Devices) > 0 {
		b.WriteString("]")
	}
	for _, s := range f.Skipped {
		if errors.Is(s.Reason, source.ErrNotVisible) {
			continue // a choice, not a problem
		}
		fmt.Fprintf(&b, "; left out %s (%s): %v", s.Device.ID, s.Device.Name, s.Reason)
	}
	return b.String()
}

func (c config) logFinding(f Finding) {
	if c.log == nil {
		return
	}
	if f.Err != nil {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "energy source unusable",
			slog.String("otelenergy.source", f.Kind), slog.String("why", f.Err.Error()))
		return
	}
	c.log.LogAttrs(context.Background(), slog.LevelInfo, "energy source found",
		slog.String("otelenergy.source", f.Kind), slog.String("finding", f.String()))
}

// Open opens the source of the given kind. The finding describes it, or
// why it could not be opened, which is also the error.
func Open(kind string, opts ...Option) (otelenergy.Source, Finding, error) {
	c := newConfig(opts)
	return c.open(kind)
}

func (c config) open(kind string) (otelenergy.Source, Finding, error) {
	f := Finding{Kind: kind}
	if c.set != nil && kind != NVML {
		// The other sources take fixed pids: the set as it stands now.
		c.pids = c.set.AppendPIDs(slices.Clone(c.pids))
	}
	var s otelenergy.Source
	var err error
	switch kind {
	case AMDSMI, IntelHwmon:
		if len(c.devices) > 0 {
			err = fmt.Errorf("%w: choosing devices (%s) works on NVML only; %s meters every board it finds", otelenergy.ErrNotSupported, strings.Join(c.devices, ","), kind)
		}
	}
	switch {
	case err != nil:
	case kind == NVML:
		var o []nvmlsource.Option
		if len(c.devices) > 0 {
			o = append(o, nvmlsource.WithDevices(c.devices...))
		}
		if len(c.pids) > 0 {
			o = append(o, nvmlsource.WithProcesses(c.pids...))
		}
		if c.set != nil {
			o = append(o, nvmlsource.WithProcessSet(c.set))
		}
		var ns *nvmlsource.Source
		if ns, err = nvmlsource.New(o...); err == nil {
			s = ns
		}
	case kind == AMDSMI:
		o := append([]amdsmi.Option(nil), c.amdOpts...)
		if c.amdLib != nil {
			o = append(o, amdsmi.WithLib(c.amdLib))
		}
		if len(c.pids) > 0 {
			o = append(o, amdsmi.WithProcesses(c.pids...))
		}
		var as *amdsmi.Source
		if as, err = amdsmi.New(o...); err == nil {
			s = as
		}
	case kind == IntelHwmon:
		var is *intelgpu.Source
		if is, err = intelgpu.New(intelgpu.WithRoot(c.sysfs)); err == nil {
			s = is
		}
	case kind == RAPL:
		var rs *rapl.Source
		o := append([]rapl.Option{rapl.WithRoot(c.sysfs), rapl.WithDomains(c.domains...), rapl.WithProcesses(c.pids...)}, c.raplOpt...)
		if rs, err = rapl.New(o...); err == nil {
			s = rs
		}
	default:
		err = fmt.Errorf("%w: %q (known: %s, %s, %s, %s)", ErrUnknownKind, kind, NVML, AMDSMI, IntelHwmon, RAPL)
	}
	if err != nil {
		f.Err = err
		c.logFinding(f)
		return nil, f, err
	}
	f.Devices = s.Devices()
	if sk, ok := s.(source.Skipper); ok {
		f.Skipped = sk.Skipped()
	}
	c.logFinding(f)
	return s, f, nil
}

// Accelerator opens the first accelerator source that finds a readable
// device, trying NVML, AMD SMI and Intel hwmon in turn ([WithKinds]
// changes the list). It returns a finding for every source tried. When
// none is usable it fails with an error wrapping [otelenergy.ErrNoDevices]
// and every source's error.
func Accelerator(opts ...Option) (otelenergy.Source, []Finding, error) {
	c := newConfig(opts)
	var fs []Finding
	var errs []error
	for _, k := range c.kinds {
		if k == RAPL {
			errs = append(errs, fmt.Errorf("%w: %s is the host's, not an accelerator: use Host", ErrUnknownKind, k))
			continue
		}
		s, f, err := c.open(k)
		fs = append(fs, f)
		if err == nil {
			return s, fs, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", k, err))
	}
	return nil, fs, fmt.Errorf("%w: no accelerator source usable: %w", otelenergy.ErrNoDevices, errors.Join(errs...))
}

// Host opens the host's RAPL source: the CPU packages (hw.type cpu) and
// their DRAM (hw.type memory) by default. Its errors wrap
// [otelenergy.ErrUnavailable] where there is no RAPL (a VM, no powercap
// mount) and [otelenergy.ErrNoDevices] where its counters cannot be read,
// with the grant that is missing when they are refused.
func Host(opts ...Option) (otelenergy.Source, Finding, error) {
	c := newConfig(opts)
	return c.open(RAPL)
}
