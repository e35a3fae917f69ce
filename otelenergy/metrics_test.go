package otelenergy

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/simgpu"
)

func TestMetricsMatchGroundTruth(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{Devices: 2, Seed: 9, Noise: 0.05}), WithMeterProvider(mp))
	r.m.Sample()
	base := []uint64{r.gpu.TrueEnergyMJ(0), r.gpu.TrueEnergyMJ(1)}
	ctx := context.Background()
	job := r.gpu.Begin(0)
	// Longer than the live window, so that hw.power covers tokens only.
	for range 120 {
		job.Tokens(10)
		r.m.AddTokens(ctx, 10)
		r.m.AddInputTokens(ctx, 3)
		r.tick(step)
	}
	job.End()
	r.gpu.InjectReadErrors(1, 2)
	r.tick(step)
	r.tick(step)
	rm := collect(t, rd)

	energy := floatPoints(t, rm, "hw.energy", semconv.HwIDKey)
	for i, d := range r.m.Devices() {
		want := float64(r.gpu.TrueEnergyMJ(i)-base[i]) / 1000
		if i == 1 {
			// The two failed reads are not yet covered by a good one.
			want = float64(r.m.Totals().EnergyMJ[1]) / 1000
		}
		if got := energy[d.ID]; got != want {
			t.Errorf("hw.energy{hw.id=%s} = %v J, want %v J", d.ID, got, want)
		}
	}
	m, _ := findMetric(rm, "hw.energy")
	if m.Unit != "J" {
		t.Errorf("hw.energy unit %q", m.Unit)
	}
	attrs := m.Data.(metricdata.Sum[float64]).DataPoints[0].Attributes
	for _, kv := range []attribute.KeyValue{semconv.HwTypeGpu, semconv.HwName("Simulated GPU"), semconv.HwVendor("otelenergy")} {
		if v, ok := attrs.Value(kv.Key); !ok || v != kv.Value {
			t.Errorf("hw.energy lacks %s=%s: %v", kv.Key, kv.Value.Emit(), attrs.ToSlice())
		}
	}

	tokens, _ := findMetric(rm, "otelenergy.tokens")
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name:        "otelenergy.tokens",
		Description: "Tokens reported by the application.",
		Unit:        "{token}",
		Data: metricdata.Sum[int64]{
			Temporality: metricdata.CumulativeTemporality,
			IsMonotonic: true,
			DataPoints: []metricdata.DataPoint[int64]{
				{Attributes: attribute.NewSet(tokenTypeKey.String("output")), Value: 1200},
				{Attributes: attribute.NewSet(tokenTypeKey.String("input")), Value: 360},
			},
		},
	}, tokens, metricdatatest.IgnoreTimestamp())

	errs := intPoints(t, rm, "otelenergy.sampler.errors", semconv.HwIDKey)
	if errs[r.m.Devices()[0].ID] != 0 || errs[r.m.Devices()[1].ID] != 2 {
		t.Errorf("sampler errors %v, want 0 and 2", errs)
	}

	// Power over the 10 s live window on GPU 0, which ends at the two idle
	// steps: idle 60 W plus 100 tokens/s at 0.3 J split over 2 GPUs for
	// 9.8 s, ±5% noise on the tokens.
	power := floatPoints(t, rm, "hw.power", semconv.HwIDKey)
	wantW := 60 + 100*0.3/2*0.98
	if got := power[r.m.Devices()[0].ID]; math.Abs(got-wantW) > 0.02*wantW {
		t.Errorf("hw.power = %v W, want about %v W", got, wantW)
	}
	age := floatPoints(t, rm, "otelenergy.sampler.age", "")
	if age[""] != 0 {
		t.Errorf("sampler age = %v s right after a sample", age[""])
	}
	r.clock.Advance(1500 * time.Millisecond)
	if age := floatPoints(t, collect(t, rd), "otelenergy.sampler.age", ""); age[""] != 1.5 {
		t.Errorf("sampler age = %v s, want 1.5", age[""])
	}
}

func TestEnergyPerTokenAbsentWithoutTokens(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp))
	r.m.Sample()
	for range 5 {
		r.tick(step)
	}
	if pts := floatPoints(t, collect(t, rd), "otelenergy.energy_per_token", windowKey); len(pts) != 0 {
		t.Fatalf("energy_per_token observed with no tokens: %v", pts)
	}
	r.m.AddTokens(context.Background(), 50)
	r.tick(step)
	pts := floatPoints(t, collect(t, rd), "otelenergy.energy_per_token", windowKey)
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

// TestLiveEnergyPerTokenIsWindowed runs 10 s at one J/token and then 12 s
// at another: the live figure covers only the last 10 s, the run figure
// all of it. Both are exact in the idealized model.
func TestLiveEnergyPerTokenIsWindowed(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp))
	r.m.Sample()
	job := r.gpu.Begin(0)
	phase := func(steps, tokens int) {
		for range steps {
			job.Tokens(tokens)
			r.m.AddTokens(context.Background(), tokens)
			r.tick(step)
		}
	}
	phase(100, 100) // 6 J idle + 30 J of tokens per 100 tokens: 0.36 J/token
	phase(120, 10)  // 6 J idle + 3 J of tokens per 10 tokens: 0.9 J/token
	job.End()
	pts := floatPoints(t, collect(t, rd), "otelenergy.energy_per_token", windowKey)
	if got := pts["live"]; math.Abs(got-0.9) > 1e-9 {
		t.Errorf("live J/token = %v, want 0.9 (the last 10 s only)", got)
	}
	wantRun := (100*36.0 + 120*9.0) / (100*100 + 120*10)
	if got := pts["run"]; math.Abs(got-wantRun) > 1e-9 {
		t.Errorf("run J/token = %v, want %v", got, wantRun)
	}
}

// TestLedgerAndRunMetricsExported checks the value of each figure that
// only a metric carries: energy no request got, process-wide and per run,
// the run's J/token and rejected token reports. With no request ever
// started, every metered millijoule is unattributed.
func TestLedgerAndRunMetricsExported(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{Devices: 2}), WithMeterProvider(mp))
	r.m.Sample()
	ctx := context.Background()
	// Past the ledger's warm-up, which holds splits until its model has
	// seen most of a horizon, so that every interval below is split as
	// soon as it is ready.
	for range 100 {
		r.tick(step)
	}
	run := r.m.BeginRun("m1")
	runRd := sdkmetric.NewManualReader()
	runMP, err := r.m.RunMeterProvider(run, resource.Empty(), sdkmetric.WithReader(runRd))
	if err != nil {
		t.Fatal(err)
	}
	defer runMP.Shutdown(ctx)
	job := r.gpu.Begin(0)
	for range 20 {
		job.Tokens(4)
		r.m.AddTokens(ctx, 4)
		r.tick(step)
	}
	job.End()
	r.m.AddTokens(ctx, -1)
	r.m.AddInputTokens(ctx, maxTokensPerCall+1)

	metered := r.m.Totals().TotalEnergyMJ()
	rm := collect(t, rd)
	if got := floatPoints(t, rm, "otelenergy.energy.unattributed", "")[""]; got != float64(metered)/1000 {
		t.Errorf("otelenergy.energy.unattributed = %v J, want every metered joule, %v", got, float64(metered)/1000)
	}
	if got := intPoints(t, rm, "otelenergy.tokens.rejected", "")[""]; got != 2 {
		t.Errorf("otelenergy.tokens.rejected = %d, want 2", got)
	}

	view := run.Since(r.m.Totals())
	runE := float64(view.TotalEnergyMJ()) / 1000
	rrm := collect(t, runRd)
	var sum float64
	for _, v := range floatPoints(t, rrm, "otelenergy.run.energy", semconv.HwIDKey) {
		sum += v
	}
	if !(runE > 0) || math.Abs(sum-runE) > 1e-9 {
		t.Errorf("otelenergy.run.energy sums to %v J, want %v J", sum, runE)
	}
	if got := floatPoints(t, rrm, "otelenergy.run.energy.unattributed", "")[""]; math.Abs(got-runE) > 1e-9 {
		t.Errorf("otelenergy.run.energy.unattributed = %v J, want the run's whole %v J", got, runE)
	}
	if got, want := floatPoints(t, rrm, "otelenergy.run.energy_per_token", "")[""], runE/80; math.Abs(got-want) > 1e-9 {
		t.Errorf("otelenergy.run.energy_per_token = %v, want %v", got, want)
	}
	if got := intPoints(t, rrm, "otelenergy.run.tokens", tokenTypeKey)["output"]; got != 80 {
		t.Errorf("otelenergy.run.tokens{output} = %d, want 80", got)
	}
}

// TestRunSwapsNeverDecrease swaps runs three times and resets a counter,
// collecting after every step: the process-cumulative counters never
// decrease, and each run's own view starts at zero.
func TestRunSwapsNeverDecrease(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{Devices: 2}), WithMeterProvider(mp), WithModel("m0"))
	r.m.Sample()
	ctx := context.Background()
	last := map[string]float64{}
	checkMonotonic := func(step string) {
		t.Helper()
		for id, v := range floatPoints(t, collect(t, rd), "hw.energy", semconv.HwIDKey) {
			if v < last[id] {
				t.Fatalf("%s: hw.energy{%s} went backwards: %v -> %v", step, id, last[id], v)
			}
			last[id] = v
		}
	}
	type runReader struct {
		rd *sdkmetric.ManualReader
		mp *sdkmetric.MeterProvider
	}
	newRunReader := func() runReader {
		rrd := sdkmetric.NewManualReader()
		rmp, err := r.m.RunMeterProvider(r.m.Run(), resource.Empty(), sdkmetric.WithReader(rrd))
		if err != nil {
			t.Fatal(err)
		}
		return runReader{rrd, rmp}
	}
	cur := newRunReader()
	job := r.gpu.Begin(0)
	for swap := 1; swap <= 3; swap++ {
		for i := range 10 {
			job.Tokens(4)
			r.m.AddTokens(ctx, 4)
			if swap == 2 && i == 5 {
				r.gpu.InjectReset(0)
			}
			r.tick(step)
			checkMonotonic("ticking")
		}
		for id, v := range floatPoints(t, collect(t, cur.rd), "otelenergy.run.energy", semconv.HwIDKey) {
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
		frozen := floatPoints(t, collect(t, cur.rd), "otelenergy.run.energy", semconv.HwIDKey)
		r.tick(step)
		if after := floatPoints(t, collect(t, cur.rd), "otelenergy.run.energy", semconv.HwIDKey); !mapsEqual(frozen, after) {
			t.Fatalf("ended run's energy moved: %v -> %v", frozen, after)
		}
		cur.mp.Shutdown(ctx)
		cur = newRunReader()
		// A fresh run has seen one sample since its baseline.
		for id, v := range floatPoints(t, collect(t, cur.rd), "otelenergy.run.energy", semconv.HwIDKey) {
			if v > 0.1*60+1 { // at most one 100 ms step of one GPU
				t.Fatalf("run %d starts at %v J on %s, want about 0", swap, v, id)
			}
		}
		if view := r.m.Run().Since(r.m.Totals()); view.OutputTokens != 0 {
			t.Fatalf("run %d inherited %d tokens", swap, view.OutputTokens)
		}
	}
	job.End()
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
	r := newRig(t, ideal(simgpu.Config{Devices: 4}), WithMeterProvider(mp))
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
		for id, v := range floatPoints(t, collect(t, rd), "hw.energy", semconv.HwIDKey) {
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
	r := newRig(b, ideal(simgpu.Config{Devices: 8}), WithMeterProvider(mp))
	r.m.Sample()
	r.m.AddTokens(context.Background(), 100)
	for range 20 {
		r.tick(step)
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

// TestGenAIMetrics: with WithGenAIMetrics, a finished request that produced
// tokens is recorded in the three GenAI server histograms, with the
// operation, provider and run model, and its time to first token is where
// its first token was.
func TestGenAIMetrics(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp), WithModel("m1"),
		WithGenAIMetrics("text_completion", "otelenergy-test"), WithHorizon(time.Second))
	r.m.Sample()
	req := r.m.StartRequest(context.Background())
	r.tick(300 * time.Millisecond) // prefill
	for range 10 {
		r.m.AddTokens(req, 1)
		r.tick(100 * time.Millisecond)
	}
	req.End()
	r.settle(t)
	rm := collect(t, rd)
	want := map[string]float64{ // seconds
		"gen_ai.server.request.duration":      1.3,
		"gen_ai.server.time_to_first_token":   0.3,
		"gen_ai.server.time_per_output_token": 1.0 / 9,
	}
	for name, v := range want {
		m, ok := findMetric(rm, name)
		if !ok {
			t.Fatalf("%s not exported", name)
		}
		h, ok := m.Data.(metricdata.Histogram[float64])
		if !ok || len(h.DataPoints) != 1 || h.DataPoints[0].Count != 1 {
			t.Fatalf("%s: %+v, want one histogram point of one request", name, m.Data)
		}
		p := h.DataPoints[0]
		if got := p.Sum; math.Abs(got-v) > 0.11 {
			t.Errorf("%s = %v s, want %v s within one counter period", name, got, v)
		}
		for key, val := range map[attribute.Key]string{"gen_ai.operation.name": "text_completion", "gen_ai.provider.name": "otelenergy-test", "gen_ai.request.model": "m1"} {
			if got, _ := p.Attributes.Value(key); got.AsString() != val {
				t.Errorf("%s: %s = %q, want %q", name, key, got.AsString(), val)
			}
		}
	}
	if _, err := NewMonitor(r.gpu, WithGenAIMetrics("chat", "")); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("an operation without a provider: %v, want ErrInvalidConfig", err)
	}
}

// TestGenAIMetricsSkipUnended: a request still running at Shutdown is
// finalized with what it has, but it has no duration, so the GenAI
// histograms get nothing from it.
func TestGenAIMetricsSkipUnended(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp), WithGenAIMetrics("chat", "otelenergy-test"))
	r.m.Sample()
	req := r.m.StartRequest(context.Background())
	for range 5 {
		r.m.AddTokens(req, 1)
		r.tick(100 * time.Millisecond)
	}
	if err := r.m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rm := collect(t, rd)
	for _, name := range []string{"gen_ai.server.request.duration", "gen_ai.server.time_to_first_token", "gen_ai.server.time_per_output_token"} {
		if m, ok := findMetric(rm, name); ok {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && len(h.DataPoints) > 0 && h.DataPoints[0].Count > 0 {
				t.Errorf("%s recorded %d points for a request that never ended (sum %v)", name, h.DataPoints[0].Count, h.DataPoints[0].Sum)
			}
		}
	}
}
