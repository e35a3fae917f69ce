package otelenergy

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

func newReader() (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	rd := sdkmetric.NewManualReader()
	return rd, sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
}

func collect(t testing.TB, rd *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

func findMetric(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// floatPoints returns a float sum or gauge's points keyed by the value of
// key (or "" when the point lacks it).
func floatPoints(t testing.TB, rm metricdata.ResourceMetrics, name string, key attribute.Key) map[string]float64 {
	t.Helper()
	m, ok := findMetric(rm, name)
	if !ok {
		return nil
	}
	out := map[string]float64{}
	var pts []metricdata.DataPoint[float64]
	switch d := m.Data.(type) {
	case metricdata.Sum[float64]:
		if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
			t.Fatalf("%s: monotonic=%v temporality=%v, want a cumulative counter", name, d.IsMonotonic, d.Temporality)
		}
		pts = d.DataPoints
	case metricdata.Gauge[float64]:
		pts = d.DataPoints
	default:
		t.Fatalf("%s has data %T", name, m.Data)
	}
	for _, p := range pts {
		v, _ := p.Attributes.Value(key)
		out[v.Emit()] = p.Value
	}
	return out
}

func TestMetricsMatchGroundTruth(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, SimulatedConfig{Devices: 2, Seed: 9, Noise: 0.05}, WithMeterProvider(mp), WithLiveWindow(time.Second))
	r.m.Sample()
	base := []uint64{r.sim.TrueEnergyMJ(0), r.sim.TrueEnergyMJ(1)}
	ctx := context.Background()
	for range 30 {
		r.m.AddTokens(ctx, 10)
		r.m.AddInputTokens(ctx, 3)
		r.tick(100 * time.Millisecond)
	}
	r.sim.InjectReadErrors(1, 2)
	r.tick(100 * time.Millisecond)
	r.tick(100 * time.Millisecond)
	rm := collect(t, rd)

	energy := floatPoints(t, rm, MetricEnergy, semconv.HwIDKey)
	for i, d := range r.m.Devices() {
		want := float64(r.sim.TrueEnergyMJ(i)-base[i]) / 1000
		if i == 1 {
			// The two failed reads are not yet covered by a good one.
			want = float64(r.m.Totals().EnergyMJ[1]) / 1000
		}
		if got := energy[d.ID]; got != want {
			t.Errorf("hw.energy{hw.id=%s} = %v J, want %v J", d.ID, got, want)
		}
	}
	m, _ := findMetric(rm, MetricEnergy)
	if m.Unit != "J" {
		t.Errorf("hw.energy unit %q", m.Unit)
	}
	attrs := m.Data.(metricdata.Sum[float64]).DataPoints[0].Attributes
	for _, kv := range []attribute.KeyValue{semconv.HwTypeGpu, semconv.HwName("Simulated GPU"), semconv.HwVendor("otelenergy")} {
		if v, ok := attrs.Value(kv.Key); !ok || v != kv.Value {
			t.Errorf("hw.energy lacks %s=%s: %v", kv.Key, kv.Value.Emit(), attrs.ToSlice())
		}
	}

	tokens, _ := findMetric(rm, MetricTokens)
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name:        MetricTokens,
		Description: "Tokens reported by the application.",
		Unit:        "{token}",
		Data: metricdata.Sum[int64]{
			Temporality: metricdata.CumulativeTemporality,
			IsMonotonic: true,
			DataPoints: []metricdata.DataPoint[int64]{
				{Attributes: attribute.NewSet(TokenTypeKey.String("output")), Value: 300},
				{Attributes: attribute.NewSet(TokenTypeKey.String("input")), Value: 90},
			},
		},
	}, tokens, metricdatatest.IgnoreTimestamp())

	errs, _ := findMetric(rm, MetricSamplerErrors)
	for _, p := range errs.Data.(metricdata.Sum[int64]).DataPoints {
		id, _ := p.Attributes.Value(semconv.HwIDKey)
		want := int64(0)
		if id.AsString() == r.m.Devices()[1].ID {
			want = 2
		}
		if p.Value != want {
			t.Errorf("sampler errors for %s = %d, want %d", id.AsString(), p.Value, want)
		}
	}

	// Power over the 1 s live window on GPU 0: idle 60 W plus 100 tokens/s
	// at 0.3 J split over 2 GPUs, plus input tokens, ±5% noise.
	power := floatPoints(t, rm, MetricPower, semconv.HwIDKey)
	wantW := 60 + (100*0.3+30*0.02)/2
	if got := power[r.m.Devices()[0].ID]; math.Abs(got-wantW) > 0.08*wantW {
		t.Errorf("hw.power = %v W, want about %v W", got, wantW)
	}
	age := floatPoints(t, rm, MetricSamplerAge, "")
	if age[""] != 0 {
		t.Errorf("sampler age = %v s right after a sample", age[""])
	}
	r.clock.Advance(1500 * time.Millisecond)
	if age := floatPoints(t, collect(t, rd), MetricSamplerAge, ""); age[""] != 1.5 {
		t.Errorf("sampler age = %v s, want 1.5", age[""])
	}
}

func TestEnergyPerTokenAbsentWithoutTokens(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, SimulatedConfig{}, WithMeterProvider(mp))
	r.m.Sample()
	for range 5 {
		r.tick(100 * time.Millisecond)
	}
	if pts := floatPoints(t, collect(t, rd), MetricEnergyPerToken, WindowKey); len(pts) != 0 {
		t.Fatalf("energy_per_token observed with no tokens: %v", pts)
	}
	r.m.AddTokens(context.Background(), 50)
	r.tick(100 * time.Millisecond)
	pts := floatPoints(t, collect(t, rd), MetricEnergyPerToken, WindowKey)
	for _, w := range []string{"live", "run"} {
		if v, ok := pts[w]; !ok || !(v > 0) || math.IsInf(v, 0) {
			t.Fatalf("energy_per_token{window=%s} = %v, %v", w, v, ok)
		}
	}
	// Over the run: all metered energy over 50 tokens.
	if want := float64(r.m.Totals().TotalEnergyMJ()) / 1000 / 50; math.Abs(pts["run"]-want) > 1e-9 {
		t.Fatalf("run J/token = %v, want %v", pts["run"], want)
	}
}

// TestRunSwapsNeverDecrease swaps runs three times and resets a counter,
// collecting after every step: the process-cumulative counters never
// decrease, and each run's own view starts at zero.
func TestRunSwapsNeverDecrease(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, SimulatedConfig{Devices: 2}, WithMeterProvider(mp), WithModel("m0"))
	r.m.Sample()
	ctx := context.Background()
	last := map[string]float64{}
	checkMonotonic := func(step string) {
		t.Helper()
		rm := collect(t, rd)
		for id, v := range floatPoints(t, rm, MetricEnergy, semconv.HwIDKey) {
			if v < last[id] {
				t.Fatalf("%s: hw.energy{%s} went backwards: %v -> %v", step, id, last[id], v)
			}
			last[id] = v
		}
	}
	type runReader struct {
		rd  *sdkmetric.ManualReader
		mp  *sdkmetric.MeterProvider
		reg interface{ Unregister() error }
	}
	newRunReader := func() runReader {
		rrd, rmp := newReader()
		reg, err := r.m.RegisterRunMetrics(rmp, r.m.Run())
		if err != nil {
			t.Fatal(err)
		}
		return runReader{rrd, rmp, reg}
	}
	cur := newRunReader()
	for swap := 1; swap <= 3; swap++ {
		for i := range 10 {
			r.m.AddTokens(ctx, 4)
			if swap == 2 && i == 5 {
				r.sim.InjectReset(0)
			}
			r.tick(100 * time.Millisecond)
			checkMonotonic("ticking")
		}
		runEnergy := floatPoints(t, collect(t, cur.rd), MetricRunEnergy, semconv.HwIDKey)
		for id, v := range runEnergy {
			if !(v > 0) {
				t.Fatalf("run %d: otelenergy.run.energy{%s} = %v after 1 s", swap, id, v)
			}
		}
		prevRun := r.m.Run()
		next := r.m.BeginRun("m" + string(rune('0'+swap)))
		if next == prevRun || next.ID() == prevRun.ID() {
			t.Fatal("BeginRun did not begin a new run")
		}
		checkMonotonic("swap")
		// The ended run's view is frozen at its end.
		frozen := floatPoints(t, collect(t, cur.rd), MetricRunEnergy, semconv.HwIDKey)
		r.tick(100 * time.Millisecond)
		if after := floatPoints(t, collect(t, cur.rd), MetricRunEnergy, semconv.HwIDKey); !mapsEqual(frozen, after) {
			t.Fatalf("ended run's energy moved: %v -> %v", frozen, after)
		}
		cur.reg.Unregister()
		cur.mp.Shutdown(ctx)
		cur = newRunReader()
		rm := collect(t, cur.rd)
		// A fresh run has seen one sample since its baseline.
		for id, v := range floatPoints(t, rm, MetricRunEnergy, semconv.HwIDKey) {
			if v > 0.2*(60+1) { // at most one 100 ms sample of one GPU
				t.Fatalf("run %d starts at %v J on %s, want about 0", swap, v, id)
			}
		}
		if _, view := r.m.RunTotals(); view.OutputTokens != 0 {
			t.Fatalf("run %d inherited %d tokens", swap, view.OutputTokens)
		}
	}
	cur.reg.Unregister()
	cur.mp.Shutdown(ctx)
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestCollectConcurrentSafe(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, SimulatedConfig{Devices: 4}, WithMeterProvider(mp))
	r.m.Sample()
	var wg sync.WaitGroup
	done := make(chan struct{})
	run := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
					f()
				}
			}
		}()
	}
	ctx := context.Background()
	run(func() { r.m.AddTokens(ctx, 1) })
	run(func() { r.tick(time.Millisecond) })
	run(func() { r.m.BeginRun("swapped"); time.Sleep(time.Millisecond) })
	last := map[string]float64{}
	for range 200 {
		for id, v := range floatPoints(t, collect(t, rd), MetricEnergy, semconv.HwIDKey) {
			if v < last[id] {
				t.Errorf("hw.energy{%s} went backwards: %v -> %v", id, last[id], v)
			}
			last[id] = v
		}
	}
	close(done)
	wg.Wait()
}

func BenchmarkCollect(b *testing.B) {
	rd, mp := newReader()
	r := newRig(b, SimulatedConfig{Devices: 8}, WithMeterProvider(mp))
	r.m.Sample()
	r.m.AddTokens(context.Background(), 100)
	for range 20 {
		r.tick(100 * time.Millisecond)
	}
	var rm metricdata.ResourceMetrics
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := rd.Collect(ctx, &rm); err != nil {
			b.Fatal(err)
		}
	}
}
