package ledger

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/ring"
)

// timeRig is a ledger over one device ring and two time rings.
type timeRig struct {
	l     *Ledger
	dev   *ring.Ring
	times [2]*ring.Ring
	got   map[*Account]*[2]uint64
}

func newTimeRig(t testing.TB, cfg Config) *timeRig {
	t.Helper()
	g := &timeRig{got: map[*Account]*[2]uint64{}}
	var err error
	if g.dev, err = ring.New(1 << 12); err != nil {
		t.Fatal(err)
	}
	for i := range g.times {
		if g.times[i], err = ring.New(1 << 12); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Rings = []*ring.Ring{g.dev}
	cfg.TimeRings = g.times[:]
	cfg.TimeGive = func(r *Account, i int, mj uint64) {
		b := g.got[r]
		if b == nil {
			b = new([2]uint64)
			g.got[r] = b
		}
		b[i] += mj
	}
	g.l = New(cfg)
	return g
}

func (g *timeRig) time(r *Account, i int) uint64 {
	if b := g.got[r]; b != nil {
		return b[i]
	}
	return 0
}

// TestTimeRingsSplitByTime: a time ring's energy goes to the requests by
// the time each was active, shared equally at every instant, with time
// with none unattributed; it never reaches EnergyMJ, and a request is not
// final until the time rings are split past its end.
func TestTimeRingsSplitByTime(t *testing.T) {
	g := newTimeRig(t, Config{Horizon: 1e9})
	// The device is lost: only the time rings decide when a request is
	// final (a young model holds the device's intervals for a horizon).
	g.l.SetLost(0)
	var dev, t0, t1 uint64
	push := func(ts int64, dmj, mj0, mj1 uint64) {
		dev, t0, t1 = dev+dmj, t0+mj0, t1+mj1
		for _, p := range []struct {
			r *ring.Ring
			e uint64
		}{{g.dev, dev}, {g.times[0], t0}, {g.times[1], t1}} {
			if err := p.r.Push(ring.Point{T: ts, EnergyMJ: p.e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	push(0, 0, 0, 0)
	g.l.Observe(0, 0, 0)
	g.l.Settle(0, nil)
	a := newAccount(0, nil)
	g.l.Add(a)
	b := newAccount(100, nil)
	g.l.Add(b)
	g.l.Observe(100, 0, 0)
	a.End(200)
	g.l.Observe(300, 0, 0)
	b.End(300)
	g.l.Observe(400, 0, 0)
	// The device steps at 400; the time rings only at 250: neither
	// request is final, b since the time rings have not passed its end.
	if err := g.dev.Push(ring.Point{T: 400, EnergyMJ: 4000}); err != nil {
		t.Fatal(err)
	}
	dev = 4000
	for i, r := range g.times {
		if err := r.Push(ring.Point{T: 250, EnergyMJ: []uint64{2500, 250}[i]}); err != nil {
			t.Fatal(err)
		}
	}
	t0, t1 = 2500, 250
	g.l.Settle(400, nil)
	if !a.Final() || b.Final() {
		t.Fatalf("after the time rings reached 250: a final %v (want true), b final %v (want false)", a.Final(), b.Final())
	}
	push(500, 0, 2500, 250)
	g.l.Observe(500, 0, 0)
	g.l.Settle(500, nil)
	if !b.Final() {
		t.Fatal("b not final once every ring passed its end")
	}
	// Ring 0 draws 10 mJ/ns throughout, ring 1 a tenth of it. a is alone
	// on (0, 100], with b on (100, 200]; b is alone on (200, 300], and
	// nobody on (300, 500]: a 1000 + 500, b 500 + 1000, 2000 to nobody.
	want := map[string][2]uint64{"a": {1500, 150}, "b": {1500, 150}}
	if got := [2]uint64{g.time(a, 0), g.time(a, 1)}; got != want["a"] {
		t.Errorf("a's time shares %v, want %v", got, want["a"])
	}
	if got := [2]uint64{g.time(b, 0), g.time(b, 1)}; got != want["b"] {
		t.Errorf("b's time shares %v, want %v", got, want["b"])
	}
	for i := range g.times {
		split, un := g.l.TimeSplit(i)
		if split != []uint64{5000, 500}[i] || un != []uint64{2000, 200}[i] {
			t.Errorf("ring %d split %d mJ, %d unattributed", i, split, un)
		}
		if g.time(a, i)+g.time(b, i)+un != split {
			t.Errorf("ring %d: %d + %d + %d unattributed != %d split", i, g.time(a, i), g.time(b, i), un, split)
		}
	}
	if a.EnergyMJ()+b.EnergyMJ()+g.l.Unattributed()+g.l.OtherProcesses() != g.l.SplitMJ() {
		t.Error("the time rings moved energy into the device's balance")
	}
	if through, rate, ok := g.l.TimeThrough(0); !ok || through != 500 || rate != 10 {
		t.Errorf("TimeThrough(0) = %d, %v, %v; want 500, 10 mJ/ns, true", through, rate, ok)
	}
}

// TestTimeRingStallDoesNotHold: a time ring that stops stepping holds
// requests back for a horizon at most, and flags them.
func TestTimeRingStallDoesNotHold(t *testing.T) {
	g := newTimeRig(t, Config{Horizon: 1000})
	for _, r := range []*ring.Ring{g.dev, g.times[0], g.times[1]} {
		if err := r.Push(ring.Point{T: 0}); err != nil {
			t.Fatal(err)
		}
	}
	g.l.Observe(0, 0, 0)
	g.l.Settle(0, nil)
	a := newAccount(10, nil)
	g.l.Add(a)
	g.l.Observe(20, 0, 0)
	a.End(50)
	g.l.Observe(100, 0, 0)
	var e uint64
	for ts := int64(100); ts <= 1200; ts += 100 {
		e += 100
		if err := g.dev.Push(ring.Point{T: ts, EnergyMJ: e}); err != nil {
			t.Fatal(err)
		}
		g.l.Observe(ts, 0, 0)
		g.l.Settle(ts, nil)
		if ts < 1000 && a.Final() {
			t.Fatalf("final at %d before the time rings passed its end or a horizon passed", ts)
		}
	}
	if !a.Final() || a.Flags()&FlagTimeForced == 0 || a.Flags()&FlagForced != 0 {
		t.Fatalf("final %v flags %b: want final, time-forced only", a.Final(), a.Flags())
	}
}

// timeSpan is a request's active span for the reference split.
type timeSpan struct{ lo, hi int64 }

// refTimeShares splits e over (a, b] among spans by brute force over
// every nanosecond: each instant's energy e/(b−a) equally among the spans
// holding it. It returns the exact rational shares as floats.
func refTimeShares(e uint64, a, b int64, spans []timeSpan) []float64 {
	out := make([]float64, len(spans))
	per := float64(e) / float64(b-a)
	for x := a; x < b; x++ {
		n := 0
		for _, s := range spans {
			if s.lo <= x && x < s.hi {
				n++
			}
		}
		for i, s := range spans {
			if s.lo <= x && x < s.hi {
				out[i] += per / float64(n)
			}
		}
	}
	return out
}

// TestTimeRingsAgainstReference: random requests over random intervals
// get, in integer mJ, their exact time shares to within a millijoule per
// interval, and the ring's energy is conserved exactly.
func TestTimeRingsAgainstReference(t *testing.T) {
	for seed := range uint64(20) {
		checkTimeRings(t, seed)
	}
}

// FuzzTimeRings is TestTimeRingsAgainstReference over any seed.
func FuzzTimeRings(f *testing.F) {
	f.Add(uint64(1))
	f.Add(uint64(99))
	f.Fuzz(checkTimeRings)
}

// checkTimeRings splits a time ring of random intervals among random
// requests, drawn from seed, and checks the shares against
// refTimeShares and the conservation of the ring's energy.
func checkTimeRings(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 9))
	g := newTimeRig(t, Config{Horizon: 1 << 40})
	g.l.SetLost(0)
	type req struct {
		acc    *Account
		lo, hi int64
	}
	var reqs []req
	n := 1 + rng.IntN(12)
	for range n {
		lo := rng.Int64N(900)
		reqs = append(reqs, req{lo: lo, hi: lo + 1 + rng.Int64N(1000-lo)})
	}
	// Intervals: ring points at random instants in [0, 1000].
	pts := []int64{0}
	for x := int64(0); x < 1000; {
		x = min(1000, x+1+rng.Int64N(200))
		pts = append(pts, x)
	}
	energy := make([]uint64, len(pts))
	for k := 1; k < len(pts); k++ {
		energy[k] = energy[k-1] + uint64(rng.IntN(5000))
	}
	for _, r := range []*ring.Ring{g.dev, g.times[0], g.times[1]} {
		if err := r.Push(ring.Point{T: 0}); err != nil {
			t.Fatal(err)
		}
	}
	g.l.Observe(0, 0, 0)
	g.l.Settle(0, nil)
	for i := range reqs {
		reqs[i].acc = newAccount(reqs[i].lo, nil)
		g.l.Add(reqs[i].acc)
	}
	g.l.Observe(0, 0, 0)
	for i := range reqs {
		reqs[i].acc.End(reqs[i].hi)
	}
	g.l.Observe(1000, 0, 0)
	for k := 1; k < len(pts); k++ {
		if err := g.times[0].Push(ring.Point{T: pts[k], EnergyMJ: energy[k]}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*ring.Ring{g.dev, g.times[1]} {
		if err := r.Push(ring.Point{T: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	g.l.Settle(1000, nil)
	var spans []timeSpan
	for _, r := range reqs {
		spans = append(spans, timeSpan{r.lo, r.hi})
	}
	want := make([]float64, len(reqs))
	for k := 1; k < len(pts); k++ {
		for i, s := range refTimeShares(energy[k]-energy[k-1], pts[k-1], pts[k], spans) {
			want[i] += s
		}
	}
	var sum uint64
	for i, r := range reqs {
		if !r.acc.Final() {
			t.Fatalf("seed %d: request %d not final", seed, i)
		}
		got := g.time(r.acc, 0)
		sum += got
		// Cumulative rounding is off by less than a millijoule per
		// interval either way.
		if d := float64(got) - want[i]; d >= float64(len(pts)) || d <= -float64(len(pts)) {
			t.Errorf("seed %d: request %d [%d, %d) got %d mJ, want %.3f", seed, i, r.lo, r.hi, got, want[i])
		}
	}
	split, un := g.l.TimeSplit(0)
	if split != energy[len(energy)-1] || sum+un != split {
		t.Errorf("seed %d: split %d of %d; requests %d + unattributed %d", seed, split, energy[len(energy)-1], sum, un)
	}
}

// TestTimeRingsConcurrentSafe: requests start, end and report from many
// goroutines while the sampler pushes and splits the time rings; every
// millijoule lands exactly once. Run it under -race.
func TestTimeRingsConcurrentSafe(t *testing.T) {
	var mu sync.Mutex // TimeGive runs on the sampler; the test reads at the end
	g := newTimeRig(t, Config{Horizon: 1 << 40})
	g.l.SetLost(0)
	inner := g.l.cfg.TimeGive
	g.l.cfg.TimeGive = func(r *Account, i int, mj uint64) {
		mu.Lock()
		defer mu.Unlock()
		inner(r, i, mj)
	}
	var clock sync.Mutex
	now := int64(0)
	tick := func() int64 {
		clock.Lock()
		defer clock.Unlock()
		now += 1000
		return now
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var accs sync.Map
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 5000 {
				select {
				case <-stop:
					return
				default:
				}
				clock.Lock()
				start := now
				clock.Unlock()
				a := newAccount(start, nil)
				g.l.Add(a)
				a.AddOutput(1)
				// Each request lasts until the clock has moved 1 to 3
				// ticks, so that requests overlap and cover the time.
				var end int64
				for span := int64(1+(w+k)%3) * 1000; ; runtime.Gosched() {
					clock.Lock()
					end = now
					clock.Unlock()
					if end-start >= span {
						break
					}
					select {
					case <-stop:
					default:
						continue
					}
					break
				}
				g.l.End(a, end)
				accs.Store([2]int{w, k}, a)
			}
		}()
	}
	var e, first uint64
	for k := range 300 {
		ts := tick()
		e += 777
		if k == 0 {
			first = e // the first point anchors the rings
		}
		for _, r := range []*ring.Ring{g.dev, g.times[0], g.times[1]} {
			if err := r.Push(ring.Point{T: ts, EnergyMJ: e}); err != nil {
				t.Fatal(err)
			}
		}
		g.l.Observe(ts, 0, 0)
		g.l.Settle(ts, nil)
		time.Sleep(100 * time.Microsecond)
	}
	close(stop)
	wg.Wait()
	g.l.Flush(nil)
	mu.Lock()
	defer mu.Unlock()
	for i := range g.times {
		var sum uint64
		accs.Range(func(_, v any) bool {
			sum += g.time(v.(*Account), i)
			return true
		})
		split, un := g.l.TimeSplit(i)
		if sum+un != split || split != e-first || sum < split/2 {
			t.Errorf("ring %d: requests %d + unattributed %d != split %d (metered %d)", i, sum, un, split, e)
		}
	}
}
