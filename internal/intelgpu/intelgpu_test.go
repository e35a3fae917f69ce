package intelgpu_test

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/fakesysfs"
	"github.com/otelenergy/otelenergy/internal/intelgpu"
	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/otelenergy"
)

func tree(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	if err := fakesysfs.Write(root, filepath.Join("testdata", "twogpus.tree")); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestNew(t *testing.T) {
	s, err := intelgpu.New(intelgpu.WithRoot(tree(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := []source.Device{
		{ID: "0000:03:00.0", Name: "Intel GPU 0x56a0 (i915)", Vendor: "Intel", Index: 0, Type: "gpu", MaxWatts: 450},
		{ID: "0000:04:00.0", Name: "Intel GPU 0xe20b (xe)", Vendor: "Intel", Index: 1, Type: "gpu"},
	}
	got := s.Devices()
	if len(got) != len(want) {
		t.Fatalf("devices %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("device %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	sk := s.Skipped()
	if len(sk) != 1 || sk[0].Device.ID != "0000:00:02.0" || !errors.Is(sk[0].Reason, source.ErrNotSupported) {
		t.Fatalf("skipped %+v, want the integrated GPU as not supported", sk)
	}
	if mj, err := s.ReadEnergy(0); err != nil || mj != 987654321 {
		t.Fatalf("ReadEnergy(0) = %d, %v; want 987654321", mj, err)
	}
}

func TestNewNone(t *testing.T) {
	if _, err := intelgpu.New(intelgpu.WithRoot(t.TempDir())); !errors.Is(err, source.ErrUnavailable) {
		t.Fatalf("New on an empty /sys = %v, want ErrUnavailable", err)
	}
	refuse := func(name string) (*os.File, error) {
		if filepath.Base(name) == "energy1_input" {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
		return os.Open(name)
	}
	_, err := intelgpu.New(intelgpu.WithRoot(tree(t)), intelgpu.WithOpen(refuse))
	for _, want := range []error{source.ErrNoDevices, source.ErrRead, fs.ErrPermission, source.ErrNotSupported} {
		if !errors.Is(err, want) {
			t.Errorf("New with every counter refused = %v; does not match %v", err, want)
		}
	}
}

// TestTotalsExact runs a Monitor over the fake GPUs for a simulated
// minute at random power and checks each total against the energy the
// fake counted.
func TestTotalsExact(t *testing.T) {
	root := tree(t)
	s, err := intelgpu.New(intelgpu.WithRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{
		"devices/pci0000:00/0000:03:00.0/hwmon/hwmon3/energy1_input",
		"devices/pci0000:00/0000:04:00.0/hwmon/hwmon4/energy1_input",
	}
	first := []uint64{987654321098, 1500}
	value := append([]uint64(nil), first...)
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Unix(0, 0)
	m, err := otelenergy.NewMonitor(s, otelenergy.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	const step = 17 * time.Millisecond
	m.Sample()
	for range int(time.Minute / step) {
		for i, f := range files {
			value[i] += uint64((20 + rng.Float64()*280) * step.Seconds() * 1e6)
			if err := fakesysfs.Set(root, f, strconv.FormatUint(value[i], 10)); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(step)
		m.Sample()
	}
	got := m.Totals().EnergyMJ
	for i := range files {
		if want := value[i]/1000 - first[i]/1000; got[i] != want {
			t.Errorf("GPU %d: total %d mJ, want %d (truth %d µJ)", i, got[i], want, value[i]-first[i])
		}
	}
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestReadCloseConcurrentSafe(t *testing.T) {
	s, err := intelgpu.New(intelgpu.WithRoot(tree(t)))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 200 {
			if _, err := s.ReadEnergy(1); err != nil && !errors.Is(err, source.ErrUnavailable) {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	if _, err := s.ReadEnergy(0); !errors.Is(err, source.ErrUnavailable) {
		t.Fatalf("ReadEnergy after Close = %v", err)
	}
}

// BenchmarkReadEnergy compares one reading by this source with the
// baseline of os.ReadFile and strconv, a fresh open per read.
func BenchmarkReadEnergy(b *testing.B) {
	root := tree(b)
	b.Run("baseline", func(b *testing.B) {
		name := filepath.Join(root, "devices/pci0000:00/0000:03:00.0/hwmon/hwmon3/energy1_input")
		b.ReportAllocs()
		for b.Loop() {
			buf, err := os.ReadFile(name)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := strconv.ParseUint(string(buf[:len(buf)-1]), 10, 64); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("intelgpu", func(b *testing.B) {
		s, err := intelgpu.New(intelgpu.WithRoot(root))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.ReadEnergy(0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
