package rapl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/internal/sysfscounter"
)

// Kind is what [Source.Kind] returns, exported as otelenergy.source.
const Kind = "rapl"

// Domains a [Source] can meter, as powercap names its zones (without the
// package number).
const (
	Package = "package"
	Core    = "core"
	Uncore  = "uncore"
	DRAM    = "dram"
	Psys    = "psys"
)

// ErrPermission reports a counter this process may not read; see the
// package doc. It is sysfscounter's sentinel, so every source matches it.
var ErrPermission = sysfscounter.ErrPermission

// ErrOverlap reports a choice of domains of which one contains another,
// whose energy would be counted twice.
var ErrOverlap = errors.New("rapl: overlapping domains")

// ErrUnknownDomain reports a domain name [WithDomains] does not know.
var ErrUnknownDomain = errors.New("rapl: unknown domain")

// permissionHint says what grant a refused energy_uj needs.
const permissionHint = "energy_uj is readable by root only since CVE-2020-8694: run as root (a DaemonSet with /sys mounted read-only), " +
	"or grant a group read access with a udev rule or a sysfs.conf line (docs/operations.md, \"CPU and DRAM (RAPL)\")"

// Option configures [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	root          string
	domains       []string
	open          sysfscounter.OpenFunc
	pids          []int
	procRoot      string
	shareInterval time.Duration
}

// WithRoot sets where sysfs is mounted. The default is "/sys"; a container
// that mounts the host's /sys elsewhere names that place, and tests name a
// fake tree.
func WithRoot(dir string) Option {
	return optionFunc(func(c *config) { c.root = dir })
}

// WithDomains chooses the domains to meter among [Package], [Core],
// [Uncore], [DRAM] and [Psys]. The default, also used when none is given,
// is package and dram, which do not overlap and together cover the CPUs
// and their memory. [New] fails with [ErrOverlap] for psys with any other
// domain, or package with core or uncore, and with [ErrUnknownDomain] for
// any other name.
func WithDomains(domains ...string) Option {
	return optionFunc(func(c *config) { c.domains = slices.Clone(domains) })
}

// WithOpen replaces os.Open, which opens each energy_uj; tests use it to
// be refused as a non-root user is, which a test running as root cannot
// be by file modes.
func WithOpen(open sysfscounter.OpenFunc) Option {
	return optionFunc(func(c *config) { c.open = open })
}

// Source reads the chosen RAPL zones' energy counters. Create one with
// [New]. ReadEnergy is called by one goroutine at a time (the sampler);
// every method is safe to call concurrently with Close.
type Source struct {
	devices []source.Device
	skipped []source.Skipped

	counters sysfscounter.Set // one per device, wraps extended

	sharing
	closeOnce sync.Once
}

var (
	_ source.Source  = (*Source)(nil)
	_ source.Skipper = (*Source)(nil)
	_ source.Sharer  = (*Source)(nil)
)

// raplZone is one powercap RAPL zone as its directory describes it.
type raplZone struct {
	Name           string // from its name file, less a "-N" suffix: "package"
	Index          int    // the suffix, or the count of zones of that name before it
	Path           string
	MaxMicrojoules uint64 // max_energy_range_uj
	// maxErr is why max_energy_range_uj could not be read: the zone is
	// then skipped, and the others metered.
	maxErr error
}

// zone is a powercap zone found under class/powercap.
type zone struct {
	raplZone
	dir    string // the directory's name: intel-rapl:0:2
	parent string // the package zone's directory, "" for a top zone
	mmio   bool
}

// findZones lists the RAPL zones under root/class/powercap, as
// prometheus/procfs's sysfs.GetRaplZones does (and Kepler with it), but
// zone by zone: a zone whose max_energy_range_uj cannot be read (psys on
// some platforms) carries the reason rather than failing every zone, and
// the directories of other control types (dtpm, ...) are never read. It
// fails only when class/powercap cannot be listed. The range is read as
// any user may read it (only energy_uj is root's since CVE-2020-8694).
func findZones(root string) ([]raplZone, error) {
	dir := filepath.Join(root, "class", "powercap")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var zones []raplZone
	count := map[string]int{} // name -> zones of that name with no index, for the next one's
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "intel-rapl:") && !strings.HasPrefix(e.Name(), "intel-rapl-mmio:") {
			continue // the control type's own directory, or another control type
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(filepath.Join(path, "name"))
		if err != nil {
			continue
		}
		z := raplZone{Name: strings.TrimSpace(string(b)), Path: path}
		z.Index = count[z.Name]
		if n, idx, ok := strings.Cut(z.Name, "-"); ok {
			if v, err := strconv.Atoi(idx); err == nil && !strings.Contains(idx, "-") {
				z.Name, z.Index = n, v
			}
		}
		count[z.Name] = z.Index + 1
		if z.MaxMicrojoules, err = sysfscounter.ReadUint(os.Open, filepath.Join(path, "max_energy_range_uj")); err != nil {
			z.maxErr = fmt.Errorf("max_energy_range_uj: %w", err)
		}
		zones = append(zones, z)
	}
	return zones, nil
}

// New finds the RAPL zones under the sysfs root, opens the chosen
// domains' counters and reads each once.
//
// It fails with an error wrapping [source.ErrUnavailable] when there is no
// powercap RAPL interface (no RAPL, a VM, /sys not mounted),
// [ErrOverlap] or [ErrUnknownDomain] for a bad [WithDomains], and
// [source.ErrNoDevices] with each zone's reason when no chosen zone can be
// read; errors.Is matches [ErrPermission] then when a refused open was a
// reason.
func New(opts ...Option) (*Source, error) {
	c := config{root: "/sys", open: os.Open, procRoot: "/proc", shareInterval: defaultShareInterval}
	for _, o := range opts {
		o.apply(&c)
	}
	want, err := chooseDomains(c.domains)
	if err != nil {
		return nil, err
	}
	raw, err := findZones(c.root)
	if err != nil {
		return nil, fmt.Errorf("%w: rapl: no powercap interface under %s: %w", source.ErrUnavailable, c.root, err)
	}
	zones := pick(raw)
	if len(zones) == 0 {
		return nil, fmt.Errorf("%w: rapl: no RAPL zone under %s/class/powercap", source.ErrUnavailable, c.root)
	}
	s := &Source{counters: sysfscounter.Set{Name: "rapl"}}
	names := packageNames(zones)
	for _, z := range zones {
		d := source.Device{
			ID:    z.dir,
			Name:  deviceName(z, names),
			Index: len(s.devices) + len(s.skipped),
			Type:  hwType(z.Name),
		}
		if !want[z.Name] {
			s.skipped = append(s.skipped, source.Skipped{Device: d,
				Reason: fmt.Errorf("%w: domain %s not chosen", source.ErrNotVisible, z.Name)})
			continue
		}
		if z.maxErr != nil {
			// Without its range a wrap cannot be told from a reset: the
			// zone is skipped with its reason, and the others metered.
			s.skipped = append(s.skipped, source.Skipped{Device: d,
				Reason: fmt.Errorf("%w: %w", source.ErrRead, z.maxErr)})
			continue
		}
		f, err := sysfscounter.OpenWith(c.open, filepath.Join(z.Path, "energy_uj"))
		if err == nil {
			_, err = f.Read()
			if err != nil {
				f.Close()
			}
		}
		if err != nil {
			if errors.Is(err, ErrPermission) {
				err = fmt.Errorf("%w: %w; %s", source.ErrRead, err, permissionHint)
			} else {
				err = fmt.Errorf("%w: %w", source.ErrRead, err)
			}
			s.skipped = append(s.skipped, source.Skipped{Device: d, Reason: err})
			continue
		}
		s.devices = append(s.devices, d)
		s.counters.Add(f, z.MaxMicrojoules, d.ID)
	}
	if len(s.devices) == 0 {
		var reasons []error
		for _, sk := range s.skipped {
			if !errors.Is(sk.Reason, source.ErrNotVisible) {
				reasons = append(reasons, fmt.Errorf("%s (%s): %w", sk.Device.ID, sk.Device.Name, sk.Reason))
			}
		}
		if len(reasons) == 0 {
			reasons = append(reasons, fmt.Errorf("no zone of the chosen domains %v", sortedKeys(want)))
		}
		return nil, fmt.Errorf("%w: rapl: %w", source.ErrNoDevices, errors.Join(reasons...))
	}
	s.startSharing(c)
	return s, nil
}

// chooseDomains validates a choice of domains; none means the default.
func chooseDomains(ds []string) (map[string]bool, error) {
	if len(ds) == 0 {
		ds = []string{Package, DRAM}
	}
	want := map[string]bool{}
	for _, d := range ds {
		switch d {
		case Package, Core, Uncore, DRAM, Psys:
			want[d] = true
		default:
			return nil, fmt.Errorf("%w: %q (known: package, core, uncore, dram, psys)", ErrUnknownDomain, d)
		}
	}
	if want[Psys] && len(want) > 1 {
		return nil, fmt.Errorf("%w: psys covers the packages and DRAM; meter it alone, got %v", ErrOverlap, sortedKeys(want))
	}
	if want[Package] && (want[Core] || want[Uncore]) {
		return nil, fmt.Errorf("%w: a package contains its core and uncore; got %v", ErrOverlap, sortedKeys(want))
	}
	return want, nil
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// pick turns findZones' list into zones, dropping an MMIO package zone
// that the MSR interface also shows, and sorts them by directory name.
func pick(raw []raplZone) []zone {
	var zs []zone
	msr := map[string]bool{} // names of the MSR interface's zones, "package-0"
	for _, r := range raw {
		dir := filepath.Base(r.Path)
		z := zone{raplZone: r, dir: dir}
		switch {
		case strings.HasPrefix(dir, "intel-rapl-mmio:"):
			z.mmio = true
		case strings.HasPrefix(dir, "intel-rapl:"):
		default:
			continue // another control type (dtpm, ...)
		}
		if parts := strings.Split(dir, ":"); len(parts) == 3 {
			z.parent = parts[0] + ":" + parts[1]
		}
		if !z.mmio && z.parent == "" {
			msr[fullName(z)] = true
		}
		zs = append(zs, z)
	}
	out := zs[:0]
	for _, z := range zs {
		if z.mmio && (z.parent != "" || msr[fullName(z)]) {
			continue
		}
		out = append(out, z)
	}
	slices.SortFunc(out, func(a, b zone) int { return strings.Compare(a.dir, b.dir) })
	return out
}

// fullName is the zone's name as powercap writes it: "package-0", "dram".
func fullName(z zone) string {
	if z.Name == Package {
		return fmt.Sprintf("%s-%d", z.Name, z.Index)
	}
	return z.Name
}

// packageNames maps each top zone's directory to its name, so that a
// subzone can say which package it belongs to.
func packageNames(zs []zone) map[string]string {
	m := map[string]string{}
	for _, z := range zs {
		if z.parent == "" {
			m[z.dir] = fullName(z)
		}
	}
	return m
}

// deviceName is "package-0" for a package, "dram package-0" for a subzone.
func deviceName(z zone, pkgs map[string]string) string {
	if z.parent == "" {
		return fullName(z)
	}
	if p, ok := pkgs[z.parent]; ok {
		return z.Name + " " + p
	}
	return z.Name + " " + z.parent
}

// hwType maps a domain to its semantic-conventions hw.type.
func hwType(domain string) string {
	switch domain {
	case DRAM:
		return "memory"
	case Psys:
		return "host"
	default:
		return "cpu"
	}
}

// Kind returns "rapl".
func (s *Source) Kind() string { return Kind }

// Devices returns the metered zones, in directory name order. The contents
// never change; the slice is a copy.
func (s *Source) Devices() []source.Device { return slices.Clone(s.devices) }

// Skipped returns the zones found but not metered, with the reason for
// each: [source.ErrNotVisible] for a domain not chosen, [source.ErrRead]
// (and [ErrPermission] where it applies) for one that could not be read.
func (s *Source) Skipped() []source.Skipped { return slices.Clone(s.skipped) }

// ReadEnergy returns Devices()[i]'s counter in millijoules, unwrapped (see
// the package doc). A failed read wraps [source.ErrRead]; after Close,
// [source.ErrUnavailable]. It allocates nothing on success.
func (s *Source) ReadEnergy(i int) (uint64, error) { return s.counters.ReadEnergy(i) }

// Wraps returns how many wraps device i's counter has made while read, or
// 0 for an index outside Devices().
func (s *Source) Wraps(i int) uint64 {
	if i < 0 || i >= len(s.devices) {
		return 0
	}
	return s.counters.Wraps(i)
}

// Close stops the CPU-time readings, waits for them, and closes the
// counters. It is idempotent.
func (s *Source) Close() error {
	s.closeOnce.Do(s.stopSharing)
	return s.counters.Close()
}
