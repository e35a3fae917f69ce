package rapl_test

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/fakesysfs"
	"github.com/otelenergy/otelenergy/internal/rapl"
	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// tree writes the two-socket tree into a fresh directory and returns its
// root.
func tree(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	if err := fakesysfs.Write(root, filepath.Join("testdata", "twosocket.tree")); err != nil {
		t.Fatal(err)
	}
	return root
}

func ids(ds []source.Device) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID+"/"+d.Name+"/"+d.HWType())
	}
	return out
}

func TestNewDomains(t *testing.T) {
	root := tree(t)
	tests := []struct {
		name    string
		domains []string
		want    []string
	}{
		{"default", nil, []string{
			"intel-rapl:0/package-0/cpu", "intel-rapl:0:1/dram package-0/memory",
			"intel-rapl:1/package-1/cpu", "intel-rapl:1:1/dram package-1/memory"}},
		{"core and dram", []string{"core", "dram"}, []string{
			"intel-rapl:0:0/core package-0/cpu", "intel-rapl:0:1/dram package-0/memory",
			"intel-rapl:1:0/core package-1/cpu", "intel-rapl:1:1/dram package-1/memory"}},
		{"psys alone", []string{"psys"}, []string{"intel-rapl:2/psys/host"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := rapl.New(rapl.WithRoot(root), rapl.WithDomains(tt.domains...))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := strings.Join(ids(s.Devices()), " | "); got != strings.Join(tt.want, " | ") {
				t.Errorf("devices:\n got %s\nwant %s", got, strings.Join(tt.want, " | "))
			}
			// Every zone but the MMIO duplicate is either metered or
			// skipped as not chosen.
			if n := len(s.Devices()) + len(s.Skipped()); n != 7 {
				t.Errorf("%d zones metered or skipped, want 7 (the MMIO duplicate dropped)", n)
			}
			for _, sk := range s.Skipped() {
				if !errors.Is(sk.Reason, source.ErrNotVisible) {
					t.Errorf("%s skipped for %v, want ErrNotVisible", sk.Device.ID, sk.Reason)
				}
				if strings.HasPrefix(sk.Device.ID, "intel-rapl-mmio") {
					t.Errorf("MMIO duplicate %s listed", sk.Device.ID)
				}
			}
		})
	}
}

func TestNewBadDomains(t *testing.T) {
	root := tree(t)
	tests := []struct {
		name    string
		domains []string
		want    error
	}{
		{"psys with package", []string{"psys", "package"}, rapl.ErrOverlap},
		{"psys with dram", []string{"dram", "psys"}, rapl.ErrOverlap},
		{"package with core", []string{"package", "core"}, rapl.ErrOverlap},
		{"package with uncore", []string{"uncore", "package"}, rapl.ErrOverlap},
		{"unknown", []string{"gpu"}, rapl.ErrUnknownDomain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := rapl.New(rapl.WithRoot(root), rapl.WithDomains(tt.domains...))
			if !errors.Is(err, tt.want) {
				t.Fatalf("New = %v, %v; want %v", s, err, tt.want)
			}
		})
	}
}

func TestNewNoPowercap(t *testing.T) {
	_, err := rapl.New(rapl.WithRoot(t.TempDir()))
	if !errors.Is(err, source.ErrUnavailable) {
		t.Fatalf("New on an empty /sys = %v, want ErrUnavailable", err)
	}
}

// refuse opens as os.Open does, except that every energy_uj whose zone
// directory is in dirs is refused as the kernel refuses a non-root user.
func refuse(dirs ...string) func(string) (*os.File, error) {
	return func(name string) (*os.File, error) {
		for _, d := range dirs {
			if filepath.Base(filepath.Dir(name)) == d && filepath.Base(name) == "energy_uj" {
				return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
			}
		}
		return os.Open(name)
	}
}

func TestPermission(t *testing.T) {
	root := tree(t)
	t.Run("some refused", func(t *testing.T) {
		s, err := rapl.New(rapl.WithRoot(root), rapl.WithOpen(refuse("intel-rapl:1:1")))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if n := len(s.Devices()); n != 3 {
			t.Errorf("%d devices, want 3", n)
		}
		var found bool
		for _, sk := range s.Skipped() {
			if sk.Device.ID != "intel-rapl:1:1" {
				continue
			}
			found = true
			for _, want := range []error{rapl.ErrPermission, fs.ErrPermission, source.ErrRead} {
				if !errors.Is(sk.Reason, want) {
					t.Errorf("reason %v does not match %v", sk.Reason, want)
				}
			}
			if msg := sk.Reason.Error(); !strings.Contains(msg, "CVE-2020-8694") || !strings.Contains(msg, "udev") {
				t.Errorf("reason %q does not say which grant is missing", msg)
			}
		}
		if !found {
			t.Error("the refused zone is not listed as skipped")
		}
	})
	t.Run("all refused", func(t *testing.T) {
		s, err := rapl.New(rapl.WithRoot(root), rapl.WithOpen(refuse("intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1", "intel-rapl:1:1")))
		for _, want := range []error{source.ErrNoDevices, rapl.ErrPermission, fs.ErrPermission} {
			if !errors.Is(err, want) {
				t.Errorf("New = %v, %v; does not match %v", s, err, want)
			}
		}
		if err != nil && !strings.Contains(err.Error(), "intel-rapl:1:1") {
			t.Errorf("error %q does not name the zones", err)
		}
	})
}

// counters drives the fake tree's counters as hardware would: each zone
// draws a random power, and its energy_uj holds the true cumulative energy
// modulo max+1.
type counters struct {
	root  string
	rng   *rand.Rand
	zones []zoneTruth
}

type zoneTruth struct {
	dir          string
	max          uint64
	first, truth uint64 // µJ: the value at the first read, and the energy since
	value        uint64 // as written, in [0, max]
}

func newCounters(t testing.TB, root string, dirs ...string) *counters {
	c := &counters{root: root, rng: rand.New(rand.NewPCG(1, 2))}
	for _, d := range dirs {
		z := zoneTruth{dir: d, max: readUint(t, root, d, "max_energy_range_uj"), value: readUint(t, root, d, "energy_uj")}
		z.first = z.value
		c.zones = append(c.zones, z)
	}
	return c
}

func readUint(t testing.TB, root, dir, file string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "class/powercap", dir, file))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// advance adds d of energy at a random power in [lo, hi] W to every zone.
func (c *counters) advance(t testing.TB, d time.Duration, lo, hi float64) {
	for i := range c.zones {
		z := &c.zones[i]
		w := lo + c.rng.Float64()*(hi-lo)
		uj := uint64(w * d.Seconds() * 1e6)
		z.truth += uj
		span := z.max + 1
		z.value = (z.value + uj%span) % span
		if err := fakesysfs.Set(c.root, filepath.Join("class/powercap", z.dir, "energy_uj"), strconv.FormatUint(z.value, 10)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTotalsExact runs a Monitor over the fake tree for a simulated
// minute, in which package-1 and its DRAM wrap, and checks each device's
// total against the energy the fake counted: exact to the millijoule the
// source's rounding allows (the unwrapped µJ count rounded down once).
func TestTotalsExact(t *testing.T) {
	root := tree(t)
	s, err := rapl.New(rapl.WithRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, d := range s.Devices() {
		devs = append(devs, d.ID)
	}
	c := newCounters(t, root, devs...)
	now := time.Unix(0, 0)
	m, err := otelenergy.NewMonitor(s, otelenergy.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	const step = 17 * time.Millisecond
	m.Sample()
	for range int(time.Minute / step) {
		c.advance(t, step, 80, 400)
		now = now.Add(step)
		m.Sample()
	}
	got := m.Totals().EnergyMJ
	for i, z := range c.zones {
		want := (z.first+z.truth)/1000 - z.first/1000
		if got[i] != want {
			t.Errorf("%s: total %d mJ, want %d (truth %d µJ)", z.dir, got[i], want, z.truth)
		}
	}
	for i, z := range c.zones {
		want := (z.first + z.truth) / (z.max + 1)
		if i >= 2 && want == 0 {
			t.Fatalf("%s: the fake does not wrap", z.dir)
		}
		if w := s.Wraps(i); w != want {
			t.Errorf("%s: %d wraps, want %d", devs[i], w, want)
		}
	}
	st := m.Stats()
	for i, d := range st.Devices {
		if d.Glitches != 0 || d.Jitters != 0 || d.Resets != 0 || d.ReadErrors != 0 {
			t.Errorf("%s: %+v, want a clean series", devs[i], d)
		}
	}
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestReadAfterClose(t *testing.T) {
	s, err := rapl.New(rapl.WithRoot(tree(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := s.ReadEnergy(0); !errors.Is(err, source.ErrUnavailable) {
		t.Fatalf("ReadEnergy after Close = %v, want ErrUnavailable", err)
	}
	if _, err := s.ReadEnergy(9); !errors.Is(err, source.ErrRead) {
		t.Fatalf("ReadEnergy(9) = %v, want ErrRead", err)
	}
}

func TestReadCloseConcurrentSafe(t *testing.T) {
	s, err := rapl.New(rapl.WithRoot(tree(t)))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range 200 {
			for i := range s.Devices() {
				if _, err := s.ReadEnergy(i); err != nil && !errors.Is(err, source.ErrUnavailable) {
					t.Error(err)
					return
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		time.Sleep(time.Millisecond)
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
}

// TestZoneWithoutRange: a zone whose max_energy_range_uj cannot be read
// (psys on some platforms) and a directory of another control type
// (dtpm) turn off nothing: that zone is skipped with its reason, and the
// others are metered.
func TestZoneWithoutRange(t *testing.T) {
	root := tree(t)
	pc := filepath.Join(root, "class", "powercap")
	if err := os.Remove(filepath.Join(pc, "intel-rapl:0:1", "max_energy_range_uj")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(pc, "dtpm:0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pc, "dtpm:0", "name"), []byte("soc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := rapl.New(rapl.WithRoot(root))
	if err != nil {
		t.Fatalf("one zone without its range: New = %v, want the others metered", err)
	}
	defer s.Close()
	want := []string{"intel-rapl:0/package-0/cpu", "intel-rapl:1/package-1/cpu", "intel-rapl:1:1/dram package-1/memory"}
	if got := ids(s.Devices()); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("devices %v, want %v", got, want)
	}
	var found bool
	for _, sk := range s.Skipped() {
		if sk.Device.ID == "intel-rapl:0:1" {
			found = true
			if !errors.Is(sk.Reason, source.ErrRead) || !strings.Contains(sk.Reason.Error(), "max_energy_range_uj") {
				t.Fatalf("the zone without a range is skipped for %v, want source.ErrRead naming max_energy_range_uj", sk.Reason)
			}
		}
		if strings.HasPrefix(sk.Device.ID, "dtpm") {
			t.Fatalf("another control type was listed: %+v", sk)
		}
	}
	if !found {
		t.Fatalf("the zone without a range is not in Skipped: %+v", s.Skipped())
	}
}

// TestNoEnergyInvented drives a Monitor over a zone whose counter shows
// one reading above its range, then a normal one, and over a zone that
// drops from the top quarter of its range to the bottom quarter far
// faster than the package could draw: neither adds energy that was never
// drawn. The reading above the range is a read error; the impossible wrap
// is a glitch of the Monitor's tracker, charged what the zone plausibly
// drew, not the 263,143,329 mJ of a range.
func TestNoEnergyInvented(t *testing.T) {
	root := tree(t)
	s, err := rapl.New(rapl.WithRoot(root), rapl.WithDomains(rapl.Package))
	if err != nil {
		t.Fatal(err)
	}
	const max = 262_143_328_850
	set := func(dir string, uj uint64) {
		t.Helper()
		if err := fakesysfs.Set(root, filepath.Join("class/powercap", dir, "energy_uj"), strconv.FormatUint(uj, 10)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Unix(0, 0)
	m, err := otelenergy.NewMonitor(s, otelenergy.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(t.Context())
	// package-0 at 100 W and package-1 at 100 W for two seconds.
	v0, v1 := uint64(1_000_000_123), uint64(200_000_000_000) // package-1 in the top quarter
	set("intel-rapl:0", v0)
	set("intel-rapl:1", v1)
	m.Sample()
	for range 100 {
		now = now.Add(20 * time.Millisecond)
		v0 += 2_000_000
		v1 += 2_000_000
		set("intel-rapl:0", v0)
		set("intel-rapl:1", v1)
		m.Sample()
	}
	before := m.Totals().EnergyMJ
	// package-0 reads 5 J above its range once; package-1 drops to the
	// bottom quarter within 20 ms.
	now = now.Add(20 * time.Millisecond)
	set("intel-rapl:0", max+5_000_000)
	set("intel-rapl:1", 1_000_000)
	m.Sample()
	for range 10 {
		now = now.Add(20 * time.Millisecond)
		v0 += 2_000_000
		set("intel-rapl:0", v0)
		m.Sample()
	}
	after := m.Totals().EnergyMJ
	st := m.Stats()
	if d := after[0] - before[0]; d != 20_000 || st.Devices[0].ReadErrors != 1 {
		t.Errorf("package-0: %d mJ over 10 good readings at 2 J, %d read errors; want 20000 mJ and the reading above the range an error", d, st.Devices[0].ReadErrors)
	}
	// 2 kW (the default bound) for 20 ms is 40 J at most.
	if d := after[1] - before[1]; d > 40_000 || st.Devices[1].Glitches != 1 {
		t.Errorf("package-1: %d mJ after an impossible wrap (%d glitches); want at most 40000 and one glitch, not a range", d, st.Devices[1].Glitches)
	}
}
