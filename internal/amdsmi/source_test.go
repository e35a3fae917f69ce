package amdsmi_test

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelenergy/otelenergy/internal/amdsmi"
	"github.com/otelenergy/otelenergy/internal/amdsmi/amdsmitest"
	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/otelenergy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newSource builds a Source over nd whose start check advances nd's clock.
func newSource(t testing.TB, nd *amdsmitest.Node, opts ...amdsmi.Option) (*amdsmi.Source, error) {
	t.Helper()
	opts = append([]amdsmi.Option{
		amdsmi.WithLib(nd),
		amdsmi.WithSleep(func(d time.Duration) { nd.Advance(int64(d)) }),
		amdsmi.WithShareInterval(0),
	}, opts...)
	return amdsmi.New(opts...)
}

func TestOldROCm(t *testing.T) {
	nd := amdsmitest.NewMI300X(8)
	nd.Version = amdsmi.Version{Major: 24, Minor: 6, Release: 1} // ROCm 6.2
	var shut bool
	nd.ShutDownFunc = func() amdsmi.Status { shut = true; return amdsmi.StatusSuccess }
	_, err := newSource(t, nd)
	if !errors.Is(err, amdsmi.ErrOldROCm) || !errors.Is(err, source.ErrUnavailable) {
		t.Fatalf("New with AMD SMI 24.6.1 = %v, want ErrOldROCm and ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "ROCm 6.3") {
		t.Errorf("%q does not say which ROCm is needed", err)
	}
	if !shut {
		t.Error("amdsmi_shut_down not called after a refused start")
	}
	nd.Version = amdsmi.MinVersion
	s, err := newSource(t, nd)
	if err != nil {
		t.Fatalf("New with AMD SMI %s = %v", amdsmi.MinVersion, err)
	}
	s.Close()
}

func TestInitFails(t *testing.T) {
	nd := amdsmitest.NewMI300X(1)
	nd.InitFunc = func() amdsmi.Status { return amdsmi.StatusDriverNotLoaded }
	_, err := newSource(t, nd)
	if !errors.Is(err, source.ErrUnavailable) || !errors.Is(err, amdsmi.StatusDriverNotLoaded) {
		t.Fatalf("New = %v", err)
	}
}

func TestNotSupportedAndImplausible(t *testing.T) {
	nd := amdsmitest.NewMI300X(8)
	nd.Boards[4].EnergyStatus = amdsmi.StatusNotSupported // a VM guest, say
	nd.Boards[5].CounterScale = 20                        // a counter that misreads
	s, err := newSource(t, nd)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := len(s.Devices()); n != 6 {
		t.Fatalf("%d devices, want 6", n)
	}
	sk := s.Skipped()
	if len(sk) != 2 {
		t.Fatalf("skipped %+v, want 2", sk)
	}
	if sk[0].Device.ID != nd.Boards[4].UUID || !errors.Is(sk[0].Reason, source.ErrNotSupported) || !errors.Is(sk[0].Reason, amdsmi.StatusNotSupported) {
		t.Errorf("skipped[0] = %+v", sk[0])
	}
	if sk[1].Device.ID != nd.Boards[5].UUID || !errors.Is(sk[1].Reason, amdsmi.ErrImplausible) {
		t.Errorf("skipped[1] = %+v", sk[1])
	}
}

func TestNoneReadable(t *testing.T) {
	nd := amdsmitest.NewMI300X(2)
	for _, b := range nd.Boards {
		b.EnergyStatus = amdsmi.StatusNotSupported
	}
	_, err := newSource(t, nd)
	if !errors.Is(err, source.ErrNoDevices) || !errors.Is(err, source.ErrNotSupported) {
		t.Fatalf("New = %v, want ErrNoDevices and ErrNotSupported", err)
	}
}

// TestMI250DieRule: an MI250X package has two dies and only one reports
// energy, for the whole package. Listed under one socket, the second die
// is left out as the same package; listed under sockets of their own, the
// second die's counter does not move and the start check leaves it out.
func TestMI250DieRule(t *testing.T) {
	for _, sameSocket := range []bool{true, false} {
		nd := amdsmitest.NewMI250X(2)
		if !sameSocket {
			for i, b := range nd.Boards {
				b.Socket = i
			}
		}
		s, err := newSource(t, nd)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range s.Devices() {
			got = append(got, d.ID)
		}
		if strings.Join(got, ",") != "mi250x-0-gcd0,mi250x-1-gcd0" {
			t.Errorf("same socket %v: devices %v, want one die per package", sameSocket, got)
		}
		want := amdsmi.ErrSamePackage
		if !sameSocket {
			want = amdsmi.ErrImplausible
		}
		for _, sk := range s.Skipped() {
			if !errors.Is(sk.Reason, want) {
				t.Errorf("same socket %v: %s skipped for %v, want %v", sameSocket, sk.Device.ID, sk.Reason, want)
			}
		}
		s.Close()
	}
}

// mj is the ground truth's millijoules of a count: ⌊count × 1000 / 2^16⌋,
// since an MI300X count is 2^-16 J; computed with big integers, apart from
// the source's float32 arithmetic.
func mj(count *big.Int) *big.Int {
	q := new(big.Int).Mul(count, big.NewInt(1000))
	return q.Rsh(q, 16)
}

func u(v uint64) *big.Int { return new(big.Int).SetUint64(v) }

// TestTotalsExact runs a Monitor over eight fake MI300X boards for a
// simulated half minute: board 1's accumulator wraps past 2^64, board 2
// restarts from zero (a driver reload), board 3 is lost halfway, board 4
// has no counter. Each total is checked against the counts the fake drew.
func TestTotalsExact(t *testing.T) {
	nd := amdsmitest.NewMI300X(8)
	nd.Boards[1].Acc = math.MaxUint64 - 1<<28 // about 10 s from the top
	nd.Boards[4].EnergyStatus = amdsmi.StatusNotSupported
	s, err := newSource(t, nd)
	if err != nil {
		t.Fatal(err)
	}
	metered := []int{0, 1, 2, 3, 5, 6, 7} // board indices of s.Devices()
	now := time.Unix(0, 0)
	m, err := otelenergy.NewMonitor(s, otelenergy.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	// Per device: the count at the first read, at the last read before a
	// restart or loss, and the truth of what was read since.
	first := make([]uint64, len(metered))
	last := make([]uint64, len(metered))
	want := make([]*big.Int, len(metered))
	read := func() {
		nd.Do(func() {
			for i, b := range metered {
				if !nd.Boards[b].Lost {
					last[i] = nd.Boards[b].Acc
				}
			}
		})
		m.Sample()
	}
	read()
	copy(first, last)
	for i := range want {
		want[i] = new(big.Int)
	}
	firstWide := make([]*big.Int, len(metered)) // board 1's count unwrapped
	for i := range metered {
		firstWide[i] = u(first[i])
	}
	wrapped := new(big.Int) // board 1: counts drawn since the first read
	rng := rand.New(rand.NewPCG(5, 6))
	const step = 17 * time.Millisecond
	const steps = 30 * time.Second / step
	var preReset uint64
	for k := range int(steps) {
		nd.Do(func() {
			for _, b := range nd.Boards {
				b.Watts = 150 + rng.Float64()*550
			}
		})
		before := nd.Boards[1].TrueCounts
		switch k {
		case int(steps) / 3:
			// The driver reloads between two reads: the accumulator
			// restarts at 0.
			nd.Do(func() { preReset = nd.Boards[2].Acc; nd.Boards[2].Acc = 0 })
		case int(steps) / 2:
			nd.Do(func() { nd.Boards[3].Lost = true })
		}
		nd.Advance(int64(step))
		wrapped.Add(wrapped, u(nd.Boards[1].TrueCounts-before))
		now = now.Add(step)
		read()
	}
	got := m.Totals().EnergyMJ
	st := m.Stats()
	for i, b := range metered {
		var w *big.Int
		switch b {
		case 1:
			end := new(big.Int).Add(firstWide[i], wrapped)
			w = new(big.Int).Sub(mj(end), mj(firstWide[i]))
			if end.Cmp(new(big.Int).Lsh(big.NewInt(1), 64)) <= 0 {
				t.Fatal("board 1 did not wrap")
			}
		case 2:
			// Read up to the reset, then charged the new count whole.
			w = new(big.Int).Sub(mj(u(preReset)), mj(u(first[i])))
			w.Add(w, mj(u(last[i])))
		default:
			w = new(big.Int).Sub(mj(u(last[i])), mj(u(first[i])))
		}
		if !w.IsUint64() || got[i] != w.Uint64() {
			t.Errorf("board %d: total %d mJ, want %s", b, got[i], w)
		}
		lost := b == 3
		if st.Devices[i].Lost != lost {
			t.Errorf("board %d: Lost %v, want %v", b, st.Devices[i].Lost, lost)
		}
		if b == 2 && st.Devices[i].Resets != 1 {
			t.Errorf("board 2: %d resets, want 1", st.Devices[i].Resets)
		}
		if st.Devices[i].Glitches != 0 {
			t.Errorf("board %d: %d glitches", b, st.Devices[i].Glitches)
		}
	}
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestMicrojoulesToMJ(t *testing.T) {
	tests := []struct {
		hi, lo uint64
		res    float32
		want   uint64
	}{
		{0, 65536, amdsmitest.MI300XResolution, 1000},
		{0, 65535, amdsmitest.MI300XResolution, 999},
		{1, 0, amdsmitest.MI300XResolution, 281474976710656000},
		{0, 3, 1, 0},
		{0, 1000, 1, 1},
		{0, 7, 1000, 7},
		{0, 5, 0, 0},
		{0, 5, float32(math.Inf(1)), 0},
		{0, 5, float32(math.NaN()), 0},
		{0, 5, -1, 0},
		{1 << 40, 0, 1e9, math.MaxUint64},
	}
	for _, tt := range tests {
		if got := amdsmi.MicrojoulesToMJ(tt.hi, tt.lo, tt.res); got != tt.want {
			t.Errorf("MicrojoulesToMJ(%d, %d, %v) = %d, want %d", tt.hi, tt.lo, tt.res, got, tt.want)
		}
	}
}

// FuzzMicrojoulesToMJ checks the exact arithmetic against big.Rat.
func FuzzMicrojoulesToMJ(f *testing.F) {
	f.Add(uint64(0), uint64(123456789), float32(15.2587890625))
	f.Add(uint64(1), uint64(math.MaxUint64), float32(0.5))
	f.Add(uint64(0), uint64(1), float32(1e-30))
	f.Fuzz(func(t *testing.T, hi, lo uint64, res float32) {
		hi %= 4 // counts past 2^66 are beyond any board's life
		got := amdsmi.MicrojoulesToMJ(hi, lo, res)
		if !(res > 0) || math.IsInf(float64(res), 0) {
			if got != 0 {
				t.Fatalf("res %v: %d, want 0", res, got)
			}
			return
		}
		count := new(big.Int).Lsh(u(hi), 64)
		count.Add(count, u(lo))
		r := new(big.Rat).SetFloat64(float64(res))
		r.Mul(r, new(big.Rat).SetInt(count))
		r.Quo(r, big.NewRat(1000, 1))
		want := new(big.Int).Quo(r.Num(), r.Denom())
		if !want.IsUint64() {
			if got != math.MaxUint64 {
				t.Fatalf("(%d, %d, %v): %d, want saturation", hi, lo, res, got)
			}
			return
		}
		if got != want.Uint64() {
			t.Fatalf("(%d, %d, %v): %d, want %s", hi, lo, res, got, want)
		}
	})
}

// fakeProc writes a /proc whose stat files give each pid its parent.
func fakeProc(t *testing.T, parents map[uint32]uint32) string {
	t.Helper()
	root := t.TempDir()
	for pid, pp := range parents {
		dir := filepath.Join(root, strconv.Itoa(int(pid)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (p) S %d %d %d\n", pid, pp, pid, pid)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestShare(t *testing.T) {
	nd := amdsmitest.NewMI300X(4)
	const me, worker, other = 1000, 3000, 2000
	proc := fakeProc(t, map[uint32]uint32{me: 1, worker: me, other: 1})
	nd.Boards[0].Procs = []amdsmi.Process{{Pid: me, GfxNs: 100}}
	nd.Boards[1].Procs = []amdsmi.Process{{Pid: me, GfxNs: 100}, {Pid: other, GfxNs: 500}}
	nd.Boards[2].Procs = []amdsmi.Process{{Pid: other, GfxNs: 100}}
	nd.Boards[3].Procs = []amdsmi.Process{{Pid: worker, GfxNs: 100}, {Pid: other, GfxNs: 100}}
	s, err := newSource(t, nd, amdsmi.WithProcesses(me), amdsmi.WithProcTree(proc, true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check := func(when string, want []source.Share) {
		t.Helper()
		for i, w := range want {
			if got := s.Share(i); got != w {
				t.Errorf("%s: board %d share %+v, want %+v", when, i, got, w)
			}
		}
	}
	check("first listing", []source.Share{
		{Processes: 1, Split: true, Fraction: 1},
		{Processes: 2, Shared: true},
		{Processes: 1, Shared: true},
		{Processes: 2, Shared: true},
	})
	nd.Do(func() {
		nd.Boards[1].Procs = []amdsmi.Process{{Pid: me, GfxNs: 400}, {Pid: other, GfxNs: 600}}
		// The worker, a child of the attributed process, did 100 of 400.
		nd.Boards[3].Procs = []amdsmi.Process{{Pid: worker, GfxNs: 200}, {Pid: other, GfxNs: 400}}
	})
	s.RefreshShares()
	check("second listing", []source.Share{
		{Processes: 1, Split: true, Fraction: 1},
		{Processes: 2, Shared: true, Split: true, Fraction: 0.75},
		{Processes: 1, Shared: true},
		{Processes: 2, Shared: true, Split: true, Fraction: 0.25},
	})
	nd.Do(func() { nd.Boards[1].Lost = true })
	s.RefreshShares()
	if got := s.Share(1); got.Processes != -1 || !got.Shared || got.Split {
		t.Errorf("a failed listing: share %+v, want unknown", got)
	}
}

// TestShareZeroUse: the attributed process is listed but used none of the
// graphics engine since the previous listing while another process
// worked. As on NVML (package source's one rule), that is no confident
// zero: the board is shared and not split, charged whole and flagged.
// Nobody working splits evenly by count.
func TestShareZeroUse(t *testing.T) {
	nd := amdsmitest.NewMI300X(2)
	const me, other = 1000, 2000
	proc := fakeProc(t, map[uint32]uint32{me: 1, other: 1})
	nd.Boards[0].Procs = []amdsmi.Process{{Pid: me, GfxNs: 100}, {Pid: other, GfxNs: 100}}
	nd.Boards[1].Procs = []amdsmi.Process{{Pid: me, GfxNs: 100}, {Pid: other, GfxNs: 100}}
	s, err := newSource(t, nd, amdsmi.WithProcesses(me), amdsmi.WithProcTree(proc, true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nd.Do(func() {
		nd.Boards[0].Procs = []amdsmi.Process{{Pid: me, GfxNs: 100}, {Pid: other, GfxNs: 900}}
	})
	s.RefreshShares()
	if got, want := s.Share(0), (source.Share{Processes: 2, Shared: true}); got != want {
		t.Errorf("ours idle while another works: %+v, want %+v (not a confident 0)", got, want)
	}
	if got, want := s.Share(1), (source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.5}); got != want {
		t.Errorf("nobody working: %+v, want %+v", got, want)
	}
}

// TestShareOtherNamespace: this process's own pid, inside a PID namespace
// of its own, cannot be compared with AMD SMI's pids, so a board with any
// process is shared and not split, and one with none is exclusive.
func TestShareOtherNamespace(t *testing.T) {
	nd := amdsmitest.NewMI300X(2)
	nd.Boards[0].Procs = []amdsmi.Process{{Pid: uint32(os.Getpid()), GfxNs: 100}}
	s, err := newSource(t, nd, amdsmi.WithProcTree(t.TempDir(), false))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := s.Share(0), (source.Share{Processes: 1, Shared: true}); got != want {
		t.Errorf("board with a process: %+v, want %+v", got, want)
	}
	if got, want := s.Share(1), (source.Share{Processes: 0, Split: true, Fraction: 1}); got != want {
		t.Errorf("idle board: %+v, want %+v", got, want)
	}
}

func TestReadShareCloseConcurrentSafe(t *testing.T) {
	nd := amdsmitest.NewMI300X(4)
	s, err := amdsmi.New(amdsmi.WithLib(nd), amdsmi.WithSleep(func(d time.Duration) { nd.Advance(int64(d)) }),
		amdsmi.WithShareInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 500 {
			nd.Advance(int64(time.Millisecond))
			for i := range 4 {
				if _, err := s.ReadEnergy(i); err != nil && !errors.Is(err, source.ErrUnavailable) {
					t.Error(err)
					return
				}
				_ = s.Share(i)
			}
		}
	})
	wg.Go(func() {
		time.Sleep(5 * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
}

// BenchmarkReadEnergy measures the adapter's cost over the fake library:
// baseline calls the fake's EnergyCount alone, amdsmi reads through the
// Source (lock, lost check, unwrapping, exact conversion). The library's
// own cost on a real board is not measured here.
func BenchmarkReadEnergy(b *testing.B) {
	nd := amdsmitest.NewMI300X(1)
	b.Run("baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, _, st := nd.EnergyCount(1); st != amdsmi.StatusSuccess {
				b.Fatal(st)
			}
		}
	})
	b.Run("amdsmi", func(b *testing.B) {
		s, err := newSource(b, nd)
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
