package intelgpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/internal/sysfscounter"
)

// Kind is what [Source.Kind] returns.
const Kind = "intel-hwmon"

const vendor = "Intel"

// ratedMargin scales power1_rated_max into MaxWatts: boards exceed their
// TDP in short bursts (PL2).
const ratedMargin = 2

// Option configures [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	root string
	open sysfscounter.OpenFunc
}

// WithRoot sets where sysfs is mounted. The default is "/sys".
func WithRoot(dir string) Option { return optionFunc(func(c *config) { c.root = dir }) }

// withOpen replaces os.Open; tests use it to be refused as a non-root
// user may be.
func withOpen(open sysfscounter.OpenFunc) Option {
	return optionFunc(func(c *config) { c.open = open })
}

// Source reads Intel GPUs' hwmon energy counters. Create one with [New].
// ReadEnergy is called by one goroutine at a time; every method is safe to
// call concurrently with Close.
type Source struct {
	devices []source.Device
	skipped []source.Skipped

	counters sysfscounter.Set // one per device, not extended: the drivers keep energy1_input in 64 bits (see the package doc)
}

var (
	_ source.Source  = (*Source)(nil)
	_ source.Skipper = (*Source)(nil)
)

// New finds the i915 and xe GPUs under the sysfs root and opens each one's
// energy counter. It fails with an error wrapping [source.ErrUnavailable]
// when no i915 or xe GPU is found, and [source.ErrNoDevices] with each
// card's reason when none has a readable counter.
func New(opts ...Option) (*Source, error) {
	c := config{root: "/sys", open: os.Open}
	for _, o := range opts {
		o.apply(&c)
	}
	cards, err := filepath.Glob(filepath.Join(c.root, "class/drm/card*"))
	if err != nil {
		return nil, fmt.Errorf("%w: intelgpu: %w", source.ErrUnavailable, err)
	}
	slices.SortFunc(cards, func(a, b string) int {
		return compareCards(filepath.Base(a), filepath.Base(b))
	})
	s := &Source{counters: sysfscounter.Set{Name: "intelgpu"}}
	seen := map[string]bool{}
	for _, card := range cards {
		name := filepath.Base(card)
		if strings.Contains(name, "-") {
			continue // a connector, card0-DP-1
		}
		dev, err := filepath.EvalSymlinks(filepath.Join(card, "device"))
		if err != nil || seen[dev] {
			continue
		}
		hw, driver := findHwmon(dev)
		if hw == "" {
			continue // not an i915 or xe GPU
		}
		seen[dev] = true
		d := source.Device{
			ID:     filepath.Base(dev),
			Name:   productName(dev, driver),
			Vendor: vendor,
			Index:  len(s.devices) + len(s.skipped),
			Type:   "gpu",
		}
		energy := filepath.Join(hw, "energy1_input")
		if _, err := os.Stat(energy); errors.Is(err, os.ErrNotExist) {
			s.skipped = append(s.skipped, source.Skipped{Device: d,
				Reason: fmt.Errorf("%w: %s shows no energy1_input (an integrated GPU, or a driver too old)", source.ErrNotSupported, hw)})
			continue
		}
		f, err := sysfscounter.OpenWith(c.open, energy)
		if err == nil {
			if _, err = f.Read(); err != nil {
				f.Close()
			}
		}
		if err != nil {
			s.skipped = append(s.skipped, source.Skipped{Device: d, Reason: fmt.Errorf("%w: %w", source.ErrRead, err)})
			continue
		}
		if uw, err := sysfscounter.ReadUint(c.open, filepath.Join(hw, "power1_rated_max")); err == nil && uw > 0 {
			d.MaxWatts = float64(uw) / 1e6 * ratedMargin
		}
		s.devices = append(s.devices, d)
		s.counters.Add(f, 0, d.ID)
	}
	if len(s.devices) == 0 {
		if len(s.skipped) == 0 {
			return nil, fmt.Errorf("%w: intelgpu: no i915 or xe GPU under %s/class/drm", source.ErrUnavailable, c.root)
		}
		var reasons []error
		for _, sk := range s.skipped {
			reasons = append(reasons, fmt.Errorf("%s: %w", sk.Device.ID, sk.Reason))
		}
		return nil, fmt.Errorf("%w: intelgpu: %w", source.ErrNoDevices, errors.Join(reasons...))
	}
	return s, nil
}

// compareCards orders card2 before card10.
func compareCards(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// findHwmon returns the device's hwmon directory whose name is i915 or xe,
// and that name.
func findHwmon(dev string) (dir, driver string) {
	hws, _ := filepath.Glob(filepath.Join(dev, "hwmon/hwmon*"))
	slices.Sort(hws)
	for _, hw := range hws {
		b, err := os.ReadFile(filepath.Join(hw, "name"))
		if err != nil {
			continue
		}
		switch n := strings.TrimSpace(string(b)); n {
		case "i915", "xe":
			return hw, n
		}
	}
	return "", ""
}

// productName is "Intel GPU 0x56a0 (i915)": sysfs has the PCI device id,
// not the marketing name.
func productName(dev, driver string) string {
	b, err := os.ReadFile(filepath.Join(dev, "device"))
	if id := strings.TrimSpace(string(b)); err == nil && id != "" {
		return "Intel GPU " + id + " (" + driver + ")"
	}
	return "Intel GPU (" + driver + ")"
}

// Kind returns "intel-hwmon".
func (s *Source) Kind() string { return Kind }

// Devices returns the metered GPUs in card order. The slice is a copy.
func (s *Source) Devices() []source.Device { return slices.Clone(s.devices) }

// Skipped returns the i915 and xe GPUs found but not metered, with the
// reason for each.
func (s *Source) Skipped() []source.Skipped { return slices.Clone(s.skipped) }

// ReadEnergy returns Devices()[i]'s energy1_input in millijoules, rounded
// down. A failed read wraps [source.ErrRead]; after Close,
// [source.ErrUnavailable]. It allocates nothing on success.
func (s *Source) ReadEnergy(i int) (uint64, error) { return s.counters.ReadEnergy(i) }

// Close closes the counters. It is idempotent.
func (s *Source) Close() error { return s.counters.Close() }
