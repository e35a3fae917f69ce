package carbon

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestModelIntervals drives a Model as the sampler would, with a poller
// whose provider's figure changes between two reads: every interval is
// converted at the reading noted in force at its end, and operational
// and embodied emissions are each conserved interval by interval.
func TestModelIntervals(t *testing.T) {
	var g atomic.Uint64
	g.Store(120_000)
	pl, err := NewPoller(providerFunc(func(context.Context) (Intensity, error) {
		return Intensity{MgPerKWh: g.Load(), Kind: Marginal, Source: SourceWattTime}, nil
	}), WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	ug, _ := ParseGramsPerHour("40")
	pue, _ := ParsePUE("1.1")
	m, err := NewModel(pl, WithPUE(pue), WithEmbodied(Embodied(ug)))
	if err != nil {
		t.Fatal(err)
	}
	const ms = int64(time.Millisecond)
	if err := pl.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.Note(0)
	// Reads every 17 ms; the figure changes to 480 g/kWh at the poll
	// between the reads at 85 and 102 ms.
	for t0 := 17 * ms; t0 <= 204*ms; t0 += 17 * ms {
		if t0 == 102*ms {
			g.Store(480_000)
			if err := pl.Poll(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		m.Note(t0)
	}
	op, emb := make([]uint64, 2), make([]uint64, 2)
	var reqOp, reqEmb uint64
	exactOp := new(big.Rat)
	for k := int64(0); k < 6; k++ {
		a, b := k*34*ms, (k+1)*34*ms
		shares := []uint64{41_000 + uint64(k), 9_000}
		cover := []uint64{uint64(20 * ms), uint64(10 * ms)} // 4 ms idle
		res := m.Interval(a, b, shares, 700, cover, op, emb)
		wantG := uint64(120_000)
		if b >= 102*ms {
			wantG = 480_000
		}
		if res.Reading == nil || res.Reading.MgPerKWh != wantG || !res.Known {
			t.Fatalf("interval ending at %d ms: reading %+v (known %v), want %d mg/kWh", b/ms, res.Reading, res.Known, wantG)
		}
		f, _ := NewFactor(wantG, pue)
		if got := op[0] + op[1] + res.OperationalRest; got != f.Of(shares[0]+shares[1]+700) {
			t.Errorf("interval %d: operational %d µg, want %d", k, got, f.Of(shares[0]+shares[1]+700))
		}
		if got := emb[0] + emb[1] + res.EmbodiedRest; got != Embodied(ug).Of(34*time.Millisecond) {
			t.Errorf("interval %d: embodied %d µg, want %d", k, got, Embodied(ug).Of(34*time.Millisecond))
		}
		reqOp += op[0]
		reqEmb += emb[0]
		exactOp.Add(exactOp, exactUG(shares[0], wantG, pue))
	}
	d := new(big.Rat).Sub(new(big.Rat).SetUint64(reqOp), exactOp)
	if d.Abs(d).Cmp(big.NewRat(3, 1)) > 0 { // six intervals, half a µg each
		t.Errorf("request 0: %d µg, exact %s", reqOp, exactOp.FloatString(3))
	}
	// 20 ms of each 34 ms at 40 g/h: 222.2 µg per interval.
	if want := uint64(6 * 222); reqEmb < want || reqEmb > want+6 {
		t.Errorf("request 0 embodied: %d µg, want about %d", reqEmb, want)
	}
	// Estimate at the reading now: 1 kWh at 480 g/kWh × 1.1 = 528 g.
	if ug, ok := m.Estimate(3_600_000_000); !ok || ug != 528_000_000 {
		t.Errorf("Estimate = %d, %v; want 528000000", ug, ok)
	}
}

func TestModelNone(t *testing.T) {
	pl, err := NewPoller(NewStatic(Intensity{MgPerKWh: 1}), WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(pl)
	if err != nil {
		t.Fatal(err)
	}
	m.Note(0) // no reading yet: none in force
	op, emb := make([]uint64, 1), make([]uint64, 1)
	res := m.Interval(0, 100, []uint64{5000}, 0, nil, op, emb)
	if res.Reading != nil || op[0] != 0 || res.OperationalRest != 0 {
		t.Errorf("with none in force: %+v, %v", res, op)
	}
	if _, ok := m.Estimate(1000); ok {
		t.Errorf("Estimate with none in force")
	}
	for _, tt := range []struct {
		name string
		src  Reader
		opts []ModelOption
	}{
		{"nil reader", nil, nil},
		{"PUE below 1", pl, []ModelOption{WithPUE(999_999)}},
		{"embodied above 1 t/h", pl, []ModelOption{WithEmbodied(maxUGPerHour + 1)}},
		{"fixed out of range", NewStatic(Intensity{MgPerKWh: maxMgPerKWh + 1}), nil},
	} {
		if _, err := NewModel(tt.src, tt.opts...); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err = %v", tt.name, err)
		}
	}
}

// TestModelConcurrentSafe: the request path's Estimate and Current run
// while the sampler notes and converts and the poller publishes.
func TestModelConcurrentSafe(t *testing.T) {
	var g atomic.Uint64
	g.Store(100_000)
	pl, err := NewPoller(providerFunc(func(context.Context) (Intensity, error) {
		return Intensity{MgPerKWh: g.Add(1000), Kind: Average, Source: SourceStatic}, nil
	}), WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(pl, WithPUE(1_200_000))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if ug, ok := m.Estimate(3_600_000); ok && ug < 120_000 {
					t.Errorf("Estimate = %d µg, below any published reading", ug)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the poller
		defer wg.Done()
		for range 200 {
			_ = pl.Poll(context.Background())
		}
	}()
	op, emb := make([]uint64, 3), make([]uint64, 3)
	for i := range int64(2000) { // the sampler
		m.Note(i * 17)
		if i > 2 {
			m.Interval((i-2)*17, (i-1)*17, []uint64{1, 2, 3}, 4, []uint64{1, 1, 1}, op, emb)
		}
	}
	close(stop)
	wg.Wait()
}

// TestModelIntervalLengths: covers of another length than the shares are
// a contract violation that panics (it used to leave a stale embodied
// figure from the previous interval in emb, breaking conservation), and
// reused scratch slices are rewritten whole.
func TestModelIntervalLengths(t *testing.T) {
	m, err := NewModel(NewStatic(Intensity{MgPerKWh: 400_000, Kind: Average, Source: SourceStatic}),
		WithEmbodied(Embodied(3_600_000_000))) // 1 µg per µs
	if err != nil {
		t.Fatal(err)
	}
	m.Note(0)
	op, emb := make([]uint64, 3), make([]uint64, 3)
	const us = 1000
	m.Interval(0, 1000*us, []uint64{1, 1, 1}, 0, []uint64{300 * us, 300 * us, 300 * us}, op, emb)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("two covers for three shares: no panic")
			}
		}()
		m.Interval(1000*us, 1520*us, []uint64{1, 1, 1}, 0, []uint64{174 * us, 173 * us}, op, emb)
	}()
	// The same slices, now with no covers: every figure is rewritten.
	res := m.Interval(1520*us, 2040*us, []uint64{1, 1, 1}, 0, nil, op, emb)
	if emb[0]+emb[1]+emb[2] != 0 || res.EmbodiedRest != 520 {
		t.Errorf("no covers: emb %v, rest %d; want zeros and 520", emb, res.EmbodiedRest)
	}
	res = m.Interval(2040*us, 2560*us, []uint64{1, 1, 1}, 0, []uint64{174 * us, 173 * us, 0}, op, emb)
	if got := emb[0] + emb[1] + emb[2] + res.EmbodiedRest; got != 520 || emb[2] != 0 {
		t.Errorf("emb %v + rest %d = %d µg, want 520 with nothing for the third", emb, res.EmbodiedRest, got)
	}
}

// outOfRange is a custom Reader whose figure this package cannot convert.
type outOfRange struct{ r *Reading }

func (o outOfRange) Current() *Reading { return o.r }

// TestModelReaderOutOfRange: a custom Reader's figure above 10 kg/kWh
// counts as none, and the result says so instead of naming the reading
// beside zero emissions.
func TestModelReaderOutOfRange(t *testing.T) {
	m, err := NewModel(outOfRange{&Reading{Intensity: Intensity{MgPerKWh: maxMgPerKWh + 1, Kind: Average, Source: "custom"}}})
	if err != nil {
		t.Fatal(err)
	}
	m.Note(0)
	op, emb := make([]uint64, 1), make([]uint64, 1)
	res := m.Interval(0, 100, []uint64{5000}, 7, nil, op, emb)
	if res.Reading != nil || res.Known || op[0] != 0 || res.OperationalRest != 0 {
		t.Errorf("out of range: %+v, op %v; want no reading and zeros", res, op)
	}
	if _, ok := m.Estimate(1000); ok {
		t.Error("Estimate with an out-of-range reading")
	}
}

// TestStatic: a Static is both a Provider and a Reader of one intensity,
// with an average kind and the static source unless told otherwise; the
// zero Static has no reading.
func TestStatic(t *testing.T) {
	s := NewStatic(Intensity{MgPerKWh: 436_000})
	it, err := s.Intensity(context.Background())
	want := Intensity{MgPerKWh: 436_000, Kind: Average, Source: SourceStatic}
	if err != nil || it != want {
		t.Errorf("Intensity = %+v, %v; want %+v", it, err, want)
	}
	if r := s.Current(); r == nil || r.Intensity != want || r != s.Current() {
		t.Errorf("Current = %+v, want %+v, the same pointer each time", r, want)
	}
	m := NewStatic(Intensity{MgPerKWh: 90_000, Kind: Marginal, Source: "contract"})
	if r := m.Current(); r.Kind != Marginal || r.Source != "contract" {
		t.Errorf("a given kind and source: %+v", r)
	}
	var zero Static
	if _, err := zero.Intensity(context.Background()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("zero Static: Intensity err = %v, want ErrInvalidConfig", err)
	}
	if zero.Current() != nil {
		t.Error("zero Static has a reading")
	}
}
