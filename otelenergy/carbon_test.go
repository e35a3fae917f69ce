package otelenergy

import (
	"context"
	"errors"
	"math"
	"math/big"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/simgpu"
)

// switchReader is a carbon.Reader whose reading the test sets.
type switchReader struct {
	r atomic.Pointer[carbon.Reading]
}

func (s *switchReader) Current() *carbon.Reading { return s.r.Load() }

// set puts mg per kWh (an average, static-sourced figure) in force.
func (s *switchReader) set(mg uint64) *carbon.Reading {
	r := &carbon.Reading{Intensity: carbon.Intensity{MgPerKWh: mg, Kind: carbon.Average, Source: carbon.SourceStatic}}
	s.r.Store(r)
	return r
}

func newCarbonModel(t testing.TB, r carbon.Reader, opts ...carbon.ModelOption) *carbon.Model {
	t.Helper()
	m, err := carbon.NewModel(r, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// exactUG is mJ at mgPerKWh and a PUE of ppm, in µg, as an exact
// rational: mJ × mg/kWh × ppm / 3.6e12.
func exactUG(mJ, mgPerKWh, ppm uint64) *big.Rat {
	n := new(big.Int).SetUint64(mJ)
	n.Mul(n, new(big.Int).SetUint64(mgPerKWh))
	n.Mul(n, new(big.Int).SetUint64(ppm))
	return new(big.Rat).SetFrac(n, big.NewInt(3_600_000_000_000))
}

// TestCarbonIntensityChangeMidRequest runs one request for about two
// seconds at 300 W through the Monitor, on a fake clock, with the grid
// intensity going from 52 to 710 g/kWh halfway. The counter pauses around
// the change, longer than the horizon, so that every interval before it
// is split by then: the request's energy of the intervals before the
// change (M1) is read there, and the rest (M2) from its final figure.
// Its emissions must be the exact integration of both values,
// M1·52 + M2·710 g/kWh, within half a µg per interval (each interval's
// share is rounded once); all at either value would be far off.
func TestCarbonIntensityChangeMidRequest(t *testing.T) {
	const (
		tick   = 20 * time.Millisecond
		stepMJ = 30_000 // 300 W for 100 ms
		i1, i2 = 52_000, 710_000
	)
	clock := newFakeClock()
	var counter atomic.Uint64
	counter.Store(1_000_000)
	src, err := NewFuncSource([]Device{{ID: "gpu0", MaxWatts: 1000}}, func(int) (uint64, error) { return counter.Load(), nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	grid := &switchReader{}
	grid.set(i1)
	m, err := NewMonitor(src, WithClock(clock.Now), WithHorizon(500*time.Millisecond), WithMeterProvider(mpNoop()),
		WithCarbon(newCarbonModel(t, grid)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	m.Sample()
	base := counter.Load()
	req := m.StartRequest(context.Background())
	n := 0
	run := func(ticks int, stepping, ended bool) {
		for range ticks {
			if !ended {
				m.AddTokens(req, 1)
			}
			clock.Advance(tick)
			n++
			if stepping && n%5 == 0 {
				counter.Add(stepMJ)
			}
			m.Sample()
		}
	}
	run(50, true, false)  // 1 s at 52 g/kWh
	run(50, false, false) // the counter pauses past the horizon
	if split, metered := m.ledger.SplitMJ(), counter.Load()-base; split != metered {
		t.Fatalf("before the change %d mJ split of %d metered: the test needs every interval split", split, metered)
	}
	m1 := req.st.EnergyMJ()
	grid.set(i2)
	run(3, false, false) // the change is noted before the counter moves again
	run(50, true, false) // 1 s at 710 g/kWh
	req.End()
	for k := 0; !req.st.Final(); k++ {
		if k > 200 {
			t.Fatal("the request never became final")
		}
		run(1, true, true)
	}
	res := req.End()
	if !res.HasCo2e || !res.HasEnergy {
		t.Fatalf("final result %+v: want energy and emissions", res)
	}
	m2 := res.EnergyMJ - m1
	if m1 == 0 || m2 == 0 {
		t.Fatalf("M1 %d mJ, M2 %d mJ: the request must span the change", m1, m2)
	}
	exact := new(big.Rat).Add(exactUG(m1, i1, 1e6), exactUG(m2, i2, 1e6))
	exactF, _ := exact.Float64()
	intervals := m.devs[0].ring.Written() - 1
	tol := float64(intervals)/2 + 1e-9
	got := float64(res.Co2eMicrograms)
	if math.Abs(got-exactF) > tol {
		t.Fatalf("request emissions %d µg, want the exact %.3f µg (M1 %d mJ at 52 g/kWh + M2 %d mJ at 710) within %.1f µg (%d intervals)",
			res.Co2eMicrograms, exactF, m1, m2, tol, intervals)
	}
	allLow, _ := exactUG(res.EnergyMJ, i1, 1e6).Float64()
	allHigh, _ := exactUG(res.EnergyMJ, i2, 1e6).Float64()
	if math.Abs(got-allLow) <= 100*tol || math.Abs(got-allHigh) <= 100*tol {
		t.Fatalf("the scenario cannot tell the integration from one value: %v µg against %v and %v", got, allLow, allHigh)
	}
	t.Logf("%d mJ (M1 %d, M2 %d) across 52 -> 710 g/kWh: %d µg, exact %.3f µg; all at 52: %.0f µg, all at 710: %.0f µg",
		res.EnergyMJ, m1, m2, res.Co2eMicrograms, exactF, allLow, allHigh)
}

// groundTruthUG sums, over every interval of every device's ring (each
// pair of consecutive steps), its energy at the reading that was in force
// at its end, times ppm, plus its embodied emissions: what the requests
// and the unattributed counter must add up to, exactly. inForce gives the
// intensity at an instant on the Monitor's clock.
func groundTruthUG(t *testing.T, m *Monitor, inForce func(int64) uint64, ppm carbon.PUE, emb carbon.Embodied) (total, intervals uint64) {
	t.Helper()
	for _, d := range m.devs {
		r := d.ring
		if r.Oldest() != 0 {
			t.Fatal("the ring lapped: the test cannot see every interval")
		}
		prev, ok := r.At(0)
		if !ok {
			t.Fatal("empty ring")
		}
		for j := uint64(1); j < r.Written(); j++ {
			p, _ := r.At(j)
			f, err := carbon.NewFactor(inForce(p.T), ppm)
			if err != nil {
				t.Fatal(err)
			}
			total += f.Of(p.EnergyMJ-prev.EnergyMJ) + emb.Of(time.Duration(p.T-prev.T))
			intervals++
			prev = p
		}
	}
	return total, intervals
}

// TestCarbonConservation runs overlapping requests of two tenants on two
// simulated GPUs while the intensity changes three times, with a PUE of
// 1.135 and embodied emissions, and shuts down so that every interval is
// split. Σ request µg + unattributed µg must equal, to the µg, the sum
// over every interval of its energy at the intensity in force at its end
// (noted at the sampler's pass) times the PUE, plus its embodied
// emissions, computed here from the rings. The exported histogram and
// counter must carry the same figures in g, the histogram split by
// tenant with the reading's source and kind.
func TestCarbonConservation(t *testing.T) {
	rd, mp := newReader()
	grid := &switchReader{}
	grid.set(436_000)
	const pue = carbon.PUE(1_135_000)
	const emb = carbon.Embodied(12_500_000) // 12.5 g per device-hour
	r := newRig(t, ideal(simgpu.Config{Devices: 2}), WithMeterProvider(mp), WithHorizon(time.Second),
		WithBaggageAttributes(0, "tenant"),
		WithCarbon(newCarbonModel(t, grid, carbon.WithPUE(pue), carbon.WithEmbodied(emb))))
	type change struct {
		at int64
		mg uint64
	}
	changes := []change{{math.MinInt64, 436_000}}
	r.m.Sample()
	tenantCtx := func(name string) context.Context {
		m, _ := baggage.NewMember("tenant", name)
		b, _ := baggage.New(m)
		return baggage.ContextWithBaggage(context.Background(), b)
	}
	type live struct {
		req  *Request
		job  *simgpu.Job
		left int
	}
	var all []*Request
	var running []*live
	for k := range 60 {
		if k%4 == 0 && k < 44 {
			tenant := map[bool]string{false: "a", true: "b"}[k%8 == 0]
			req := r.m.StartRequest(tenantCtx(tenant))
			all = append(all, req)
			running = append(running, &live{req: req, job: r.gpu.Begin(50), left: 6 + k%5})
		}
		for _, l := range running {
			if l.left > 0 {
				l.job.Tokens(3)
				r.m.AddTokens(l.req, 3)
			}
		}
		if mg := map[int]uint64{12: 52_000, 25: 710_000, 37: 250_500}[k]; mg != 0 {
			grid.set(mg)
			r.clock.Advance(step)
			changes = append(changes, change{r.m.now(), mg}) // noted at this pass
			r.m.Sample()
		} else {
			r.tick(step)
		}
		kept := running[:0]
		for _, l := range running {
			if l.left--; l.left == 0 {
				l.job.End()
				l.req.End()
				continue
			}
			kept = append(kept, l)
		}
		running = kept
	}
	r.settle(t)
	// Every request is final: the histogram holds them all. The
	// instruments go with Shutdown, so they are read before it.
	rm := collect(t, rd)
	unBefore := r.m.co2.unattributed.Load()
	if err := r.m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	inForce := func(b int64) uint64 {
		mg := changes[0].mg
		for _, c := range changes[1:] {
			if c.at <= b {
				mg = c.mg
			}
		}
		return mg
	}
	want, intervals := groundTruthUG(t, r.m, inForce, pue, emb)

	var reqUG uint64
	byTenant := map[string]uint64{}
	for _, q := range all {
		res := q.End()
		if !res.HasCo2e {
			t.Fatalf("a request without emissions: %+v", res)
		}
		reqUG += res.Co2eMicrograms
		v := q.st.attrs.span[0].Value.AsString()
		byTenant[v] += res.Co2eMicrograms
	}
	un := r.m.co2.unattributed.Load()
	if reqUG+un != want {
		t.Fatalf("Σ requests %d µg + unattributed %d µg = %d µg; the intervals' energy at their intensity × PUE + embodied = %d µg (%d intervals)",
			reqUG, un, reqUG+un, want, intervals)
	}
	t.Logf("%d intervals, %d requests: Σ requests %d µg + unattributed %d µg = %d µg, exactly", intervals, len(all), reqUG, un, want)

	if got := floatPoints(t, rm, "otelenergy.co2e.unattributed", "")[""]; got != float64(unBefore)/1e6 || unBefore == 0 {
		t.Errorf("otelenergy.co2e.unattributed = %v g, want %v", got, float64(unBefore)/1e6)
	}
	hm, ok := findMetric(rm, "otelenergy.request.co2e")
	if !ok || hm.Unit != "g" {
		t.Fatalf("otelenergy.request.co2e missing or unit %q", hm.Unit)
	}
	sums := map[string]float64{}
	for _, dp := range hm.Data.(metricdata.Histogram[float64]).DataPoints {
		tenant, _ := dp.Attributes.Value("tenant")
		src, _ := dp.Attributes.Value(carbonSourceKey)
		kind, _ := dp.Attributes.Value(carbonKindKey)
		if src.AsString() != carbon.SourceStatic || kind.AsString() != "average" {
			t.Errorf("histogram point %v: want source static and kind average", dp.Attributes.ToSlice())
		}
		for _, kv := range dp.Attributes.ToSlice() {
			if kv.Key == "otelenergy.carbon.intensity" || kv.Key == "otelenergy.carbon.zone" {
				t.Errorf("histogram carries %s", kv.Key)
			}
		}
		sums[tenant.AsString()] += dp.Sum
	}
	for tenant, ug := range byTenant {
		if math.Abs(sums[tenant]-float64(ug)/1e6) > 1e-9 {
			t.Errorf("tenant %s: histogram sum %v g, its requests' %v g", tenant, sums[tenant], float64(ug)/1e6)
		}
	}
	if len(byTenant) != 2 {
		t.Errorf("tenants %v, want a and b", byTenant)
	}
}

// quietPoller returns a poller of p on clock that reports no error.
func quietPoller(t testing.TB, p carbon.Provider, clock func() time.Time) *carbon.Poller {
	t.Helper()
	pl, err := carbon.NewPoller(p, carbon.WithPollerClock(clock), carbon.WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// providerFunc is a carbon.Provider from a function.
type providerFunc func(context.Context) (carbon.Intensity, error)

func (f providerFunc) Intensity(ctx context.Context) (carbon.Intensity, error) { return f(ctx) }

// TestCarbonSpansAndMetrics serves two requests through otelhttp and the
// energy middleware with carbon from a Poller: the spans carry
// energy.co2e.milligrams (the estimate at End, then, through
// NewSpanExporter, exactly the final µg / 1000), the histogram records the
// final figures in the spans' contexts, and the observable instruments
// show the intensity with its source and kind, the poller's two ages
// (absent before its first answer) and its failed fetches.
func TestCarbonSpansAndMetrics(t *testing.T) {
	rd, mp := newReader()
	inmem := tracetest.NewInMemoryExporter()
	clock := newFakeClock()
	var fail atomic.Bool
	at := clock.Now().Add(-90 * time.Second)
	prov := providerFunc(func(context.Context) (carbon.Intensity, error) {
		if fail.Load() {
			return carbon.Intensity{}, carbon.ErrServer
		}
		return carbon.Intensity{MgPerKWh: 290_000, Kind: carbon.Marginal, Source: carbon.SourceWattTime, Zone: "CAISO_NORTH", At: at}, nil
	})
	pl := quietPoller(t, prov, clock.Now)
	model := newCarbonModel(t, pl)

	// The rig's clock is its own; the poller's is this one, moved along.
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp), WithCarbon(model))
	rm := collect(t, rd)
	for _, name := range []string{"otelenergy.carbon.intensity", "otelenergy.carbon.intensity.age", "otelenergy.carbon.intensity.figure_age"} {
		if _, ok := findMetric(rm, name); ok {
			t.Errorf("%s exported before the poller's first answer", name)
		}
	}
	if err := pl.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Second)

	sr, tp := newTracing(sdktrace.WithBatcher(NewSpanExporter(inmem, r.m), sdktrace.WithBatchTimeout(time.Hour)))
	defer tp.Shutdown(context.Background())
	s := newScripted(r, func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(NewMiddleware(r.m)(h), "op", otelhttp.WithTracerProvider(tp))
	})
	overlapScenario(s)
	// As they ended, the spans carried End's estimate.
	for path, a := range spansByPath(sr.Ended()) {
		if v, ok := a[co2eKey]; !ok || v.AsFloat64() <= 0 || !a[approximateKey].AsBool() {
			t.Errorf("%s ended with energy.co2e.milligrams %v (%v), approximate %v; want an estimate", path, v.AsFloat64(), ok, a[approximateKey].AsBool())
		}
	}
	flushWhileSampling(t, r, tp)
	spans := spansByPath(inmem.GetSpans().Snapshots())
	var sumUG uint64
	for _, path := range []string{"/a", "/b"} {
		st := s.st[path]
		if !st.Final() {
			t.Fatalf("%s not final", path)
		}
		v, ok := spans[path][co2eKey]
		ug := st.co2UG.Load()
		if !ok || v.AsFloat64() != float64(ug)/1000 || ug == 0 {
			t.Errorf("%s: energy.co2e.milligrams = %v (%v), want the final %d µg / 1000", path, v.AsFloat64(), ok, ug)
		}
		// 290 g/kWh at a PUE of 1: µg within a µg per interval of mJ × 290/3600.
		exact, _ := exactUG(st.EnergyMJ(), 290_000, 1e6).Float64()
		if math.Abs(float64(ug)-exact) > 20 {
			t.Errorf("%s: %d µg for %d mJ at 290 g/kWh, want about %.1f", path, ug, st.EnergyMJ(), exact)
		}
		sumUG += ug
	}

	fail.Store(true)
	if err := pl.Poll(context.Background()); err == nil {
		t.Fatal("the failing provider did not fail")
	}
	clock.Advance(2 * time.Second)
	rm = collect(t, rd)
	if got := floatPoints(t, rm, "otelenergy.carbon.intensity", carbonKindKey)["marginal"]; got != 290 {
		t.Errorf("otelenergy.carbon.intensity{kind=marginal} = %v g/kWh, want 290", got)
	}
	if got := floatPoints(t, rm, "otelenergy.carbon.intensity", carbonSourceKey)[carbon.SourceWattTime]; got != 290 {
		t.Errorf("otelenergy.carbon.intensity{source=watttime} = %v, want 290", got)
	}
	if got := floatPoints(t, rm, "otelenergy.carbon.intensity.age", "")[""]; got != 5 {
		t.Errorf("intensity age %v s, want 5 (the last good answer 3 + 2 s ago)", got)
	}
	if got := floatPoints(t, rm, "otelenergy.carbon.intensity.figure_age", "")[""]; got != 95 {
		t.Errorf("figure age %v s, want 95 (stamped 90 s before the first poll, 5 s ago)", got)
	}
	if got := intPoints(t, rm, "otelenergy.carbon.fetch_errors", "")[""]; got != 1 {
		t.Errorf("fetch errors %v, want 1", got)
	}
	hm, _ := findMetric(rm, "otelenergy.request.co2e")
	h := hm.Data.(metricdata.Histogram[float64])
	if len(h.DataPoints) != 1 || h.DataPoints[0].Count != 2 {
		t.Fatalf("request co2e histogram %+v, want one point of two requests", h.DataPoints)
	}
	dp := h.DataPoints[0]
	if math.Abs(dp.Sum-float64(sumUG)/1e6) > 1e-12 {
		t.Errorf("histogram sum %v g, want %v", dp.Sum, float64(sumUG)/1e6)
	}
	if len(dp.Exemplars) == 0 {
		t.Error("no exemplars on the request co2e histogram")
	}
	for _, kv := range dp.Attributes.ToSlice() {
		if kv.Key == "otelenergy.carbon.zone" || kv.Value.AsString() == "CAISO_NORTH" {
			t.Errorf("the zone is an attribute: %v", dp.Attributes.ToSlice())
		}
	}
	if v, _ := dp.Attributes.Value(carbonKindKey); v.AsString() != "marginal" {
		t.Errorf("histogram kind %q, want marginal", v.AsString())
	}
}

// TestCarbonOff: without WithCarbon nothing of it shows: no span
// attribute, no instrument, HasCo2e false, and the same energy as with
// it. The same scenario with carbon shows all of them, so that the test
// tells the two apart.
func TestCarbonOff(t *testing.T) {
	names := []string{"otelenergy.request.co2e", "otelenergy.carbon.intensity", "otelenergy.co2e.unattributed"}
	type outcome struct {
		spanCo2e int
		metrics  int
		hasCo2e  bool
		mj       uint64
	}
	run := func(opts ...Option) outcome {
		rd, mp := newReader()
		sr, tp := newTracing()
		defer tp.Shutdown(context.Background())
		r := newRig(t, ideal(simgpu.Config{}), append([]Option{WithMeterProvider(mp)}, opts...)...)
		var res Result
		s := newScripted(r, func(h http.Handler) http.Handler {
			return otelhttp.NewHandler(NewMiddleware(r.m)(h), "op", otelhttp.WithTracerProvider(tp))
		})
		overlapScenario(s)
		r.settle(t)
		for _, st := range s.st {
			res = (&Request{Context: context.Background(), st: st}).End()
			if res.HasCo2e {
				break
			}
		}
		var o outcome
		o.hasCo2e, o.mj = res.HasCo2e, s.st["/a"].EnergyMJ()
		for _, sp := range sr.Ended() {
			if _, ok := spanAttrs(sp)[co2eKey]; ok {
				o.spanCo2e++
			}
		}
		rm := collect(t, rd)
		for _, n := range names {
			if _, ok := findMetric(rm, n); ok {
				o.metrics++
			}
		}
		return o
	}
	off := run()
	on := run(WithCarbon(newCarbonModel(t, carbon.NewStatic(carbon.Intensity{MgPerKWh: 436_000}))))
	if off.spanCo2e != 0 || off.metrics != 0 || off.hasCo2e {
		t.Errorf("carbon off: %d spans with energy.co2e.milligrams, %d carbon instruments, HasCo2e %v; want none", off.spanCo2e, off.metrics, off.hasCo2e)
	}
	if on.spanCo2e != 2 || on.metrics != len(names) || !on.hasCo2e {
		t.Errorf("carbon on: %d spans with energy.co2e.milligrams, %d of %d carbon instruments, HasCo2e %v; want all", on.spanCo2e, on.metrics, len(names), on.hasCo2e)
	}
	if off.mj != on.mj {
		t.Errorf("energy %d mJ without carbon, %d with: carbon changed the split", off.mj, on.mj)
	}
}

// TestCarbonConcurrentSafe runs requests on many goroutines against the
// running sampler while the intensity flips between two values and the
// metrics are collected, under -race. After Shutdown, every interval was
// converted at one of the two values, so Σ requests + unattributed lies
// between the whole energy at the lower and at the higher, plus the
// embodied emissions exactly.
func TestCarbonConcurrentSafe(t *testing.T) {
	rd, mp := newReader()
	grid := &switchReader{}
	grid.set(100_000)
	const emb = carbon.Embodied(3_600_000) // 1 µg per device-ms
	t0 := time.Now()
	src, err := NewFuncSource([]Device{{ID: "gpu0"}, {ID: "gpu1"}}, func(i int) (uint64, error) {
		steps := uint64(time.Since(t0) / (20 * time.Millisecond))
		return 1_000_000 + steps*6_000*uint64(i+1), nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMonitor(src, WithMeterProvider(mp), WithHorizon(200*time.Millisecond),
		WithCarbon(newCarbonModel(t, grid, carbon.WithEmbodied(emb))))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		reqs []*Request
	)
	stop := make(chan struct{})
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Bounded by count and by time: about 400 ms of load, so that
			// the sampler splits tens of intervals meanwhile.
			deadline := time.Now().Add(400 * time.Millisecond)
			for k := 0; k < 5000 && time.Now().Before(deadline); k++ {
				req := m.StartRequest(context.Background())
				m.AddTokens(req, 1+k%3)
				if k%4 == g%4 {
					time.Sleep(time.Millisecond)
				}
				res := req.End()
				if !res.HasCo2e && res.HasEnergy {
					t.Errorf("a request with energy got no emissions: %+v", res)
				}
				mu.Lock()
				reqs = append(reqs, req)
				mu.Unlock()
			}
		}()
	}
	var side sync.WaitGroup
	side.Add(1)
	go func() {
		defer side.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			grid.set(map[bool]uint64{false: 100_000, true: 800_000}[k%2 == 0])
			collect(t, rd)
			time.Sleep(3 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(stop)
	side.Wait()
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var reqUG uint64
	for _, q := range reqs {
		res := q.End()
		reqUG += res.Co2eMicrograms
	}
	total := reqUG + m.co2.unattributed.Load()
	lo, _ := groundTruthUG(t, m, func(int64) uint64 { return 100_000 }, carbon.PUENone, emb)
	hi, n := groundTruthUG(t, m, func(int64) uint64 { return 800_000 }, carbon.PUENone, emb)
	if total < lo || total > hi {
		t.Fatalf("Σ requests + unattributed = %d µg, outside [%d, %d] (all intervals at 100 or at 800 g/kWh)", total, lo, hi)
	}
	t.Logf("%d requests, %d intervals: %d µg in [%d, %d]", len(reqs), n, total, lo, hi)
}

// TestCarbonNoIntensityYet: with carbon from a provider that has not
// answered (no fallback), a request gets no figure (HasCo2e false, no
// span attribute, nothing recorded) rather than 0 g; once the provider
// answers, the next request gets one.
func TestCarbonNoIntensityYet(t *testing.T) {
	rd, mp := newReader()
	sr, tp := newTracing()
	defer tp.Shutdown(context.Background())
	clock := newFakeClock()
	pl := quietPoller(t, carbon.NewStatic(carbon.Intensity{MgPerKWh: 300_000}), clock.Now)
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp), WithCarbon(newCarbonModel(t, pl)))
	s := newScripted(r, func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(NewMiddleware(r.m)(h), "op", otelhttp.WithTracerProvider(tp))
	})
	serve := func(path string) Result {
		s.begin(path)
		for range 5 {
			s.tokens(path, 4)
			r.tick(step)
		}
		s.end(path)
		r.settle(t)
		return (&Request{Context: context.Background(), st: s.st[path]}).End()
	}
	r.m.Sample()
	before := serve("/before")
	if !before.HasEnergy || before.EnergyMJ == 0 {
		t.Fatalf("no energy: %+v", before)
	}
	if before.HasCo2e || before.Co2eMicrograms != 0 {
		t.Errorf("no intensity in force: Result %+v, want no emissions figure", before)
	}
	if _, ok := findMetric(collect(t, rd), "otelenergy.request.co2e"); ok {
		t.Error("otelenergy.request.co2e recorded without an intensity")
	}
	if err := pl.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := serve("/after")
	if !after.HasCo2e || after.Co2eMicrograms == 0 {
		t.Errorf("after the provider answered: Result %+v, want a figure", after)
	}
	spans := spansByPath(sr.Ended())
	if _, ok := spans["/before"][co2eKey]; ok {
		t.Error("/before carries energy.co2e.milligrams")
	}
	if _, ok := spans["/after"][co2eKey]; !ok {
		t.Error("/after lacks energy.co2e.milligrams")
	}
}

// TestCarbonEmbodiedWithoutIntensity: while no intensity is in force (a
// provider not yet answered, no fallback), a request carries no emissions
// figure, so its share of embodied emissions goes to unattributed: Σ the
// histogram + unattributed is still every interval's embodied emissions,
// and the request's exact energy is not marked approximate for it.
func TestCarbonEmbodiedWithoutIntensity(t *testing.T) {
	rd, mp := newReader()
	pl := quietPoller(t, carbon.NewStatic(carbon.Intensity{MgPerKWh: 300_000}), time.Now) // never polled: no reading
	const emb = carbon.Embodied(12_500_000)
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp), WithHorizon(time.Second),
		WithCarbon(newCarbonModel(t, pl, carbon.WithEmbodied(emb))))
	r.m.Sample()
	req := r.m.StartRequest(context.Background())
	job := r.gpu.Begin(50)
	for range 20 {
		job.Tokens(3)
		r.m.AddTokens(req, 3)
		r.tick(step)
	}
	job.End()
	req.End()
	r.settle(t)
	res := req.End()
	rm := collect(t, rd)
	var histUG float64
	if hm, ok := findMetric(rm, "otelenergy.request.co2e"); ok {
		for _, dp := range hm.Data.(metricdata.Histogram[float64]).DataPoints {
			histUG += dp.Sum * 1e6
		}
	}
	if err := r.m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	want, n := groundTruthUG(t, r.m, func(int64) uint64 { return 0 }, carbon.PUENone, emb)
	un := r.m.co2.unattributed.Load()
	if want == 0 || uint64(histUG+0.5)+un != want {
		t.Errorf("Σ histogram %.0f + unattributed %d = %d µg, want the %d intervals' embodied %d µg (request holds %d µg)",
			histUG, un, uint64(histUG+0.5)+un, n, want, req.st.co2UG.Load())
	}
	if res.HasCo2e || res.Co2eMicrograms != 0 || res.Approximate {
		t.Errorf("result %+v: want no emissions figure and an exact energy figure", res)
	}
}

// TestCarbonModelOneMonitor: a Model serves one live Monitor (its
// timeline is on that Monitor's clock, its conversion single-threaded):
// a second NewMonitor on it fails, and it is free again after Shutdown.
func TestCarbonModelOneMonitor(t *testing.T) {
	model := newCarbonModel(t, carbon.NewStatic(carbon.Intensity{MgPerKWh: 436_000}))
	gpu := func() Source {
		g, err := simgpu.New(simgpu.Config{Devices: 1})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a, err := NewMonitor(gpu(), WithMeterProvider(mpNoop()), WithCarbon(model))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMonitor(gpu(), WithMeterProvider(mpNoop()), WithCarbon(model)); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a second Monitor on the same Model: %v, want ErrInvalidConfig", err)
	}
	// A Monitor that fails to build after claiming frees its claim.
	other := newCarbonModel(t, carbon.NewStatic(carbon.Intensity{MgPerKWh: 1000}))
	if _, err := NewMonitor(noDevices{gpu()}, WithMeterProvider(mpNoop()), WithCarbon(other)); !errors.Is(err, ErrNoDevices) {
		t.Fatalf("a source without devices: %v, want ErrNoDevices", err)
	}
	c, err := NewMonitor(gpu(), WithMeterProvider(mpNoop()), WithCarbon(other))
	if err != nil {
		t.Fatalf("the Model after a failed NewMonitor: %v", err)
	}
	c.Shutdown(context.Background())
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := NewMonitor(gpu(), WithMeterProvider(mpNoop()), WithCarbon(model))
	if err != nil {
		t.Fatalf("the Model after its Monitor's Shutdown: %v", err)
	}
	b.Shutdown(context.Background())
}

// noDevices is a Source that shows no device.
type noDevices struct{ Source }

func (noDevices) Devices() []Device { return nil }
