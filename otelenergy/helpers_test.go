package otelenergy

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/otelenergy/otelenergy/internal/fakeclock"
	"github.com/otelenergy/otelenergy/simgpu"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a manual clock shared by a Monitor and a simulated GPU.
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock { return fakeclock.New(fakeclock.Epoch()) }

// step is the counter period of the rigs' idealized GPUs. Tests that tick
// by step read every counter step at its instant, so the Monitor's totals
// equal the GPU's true energy exactly.
const step = 100 * time.Millisecond

// testRig is a Monitor over a simulated GPU on a fake clock.
type testRig struct {
	m     *Monitor
	gpu   *simgpu.GPU
	clock *fakeClock
}

// ideal returns cfg in simgpu's idealized model with step as its period:
// idle power × time plus a fixed cost per token, no prefill, steps aligned
// with the GPU's creation.
func ideal(cfg simgpu.Config) simgpu.Config {
	cfg.UpdatePeriod = step
	return simgpu.Idealized(cfg)
}

func newRig(t testing.TB, cfg simgpu.Config, opts ...Option) *testRig {
	t.Helper()
	clock := newFakeClock()
	cfg.Now = clock.Now
	gpu, err := simgpu.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]Option{WithClock(clock.Now)}, opts...)
	m, err := NewMonitor(gpu, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return &testRig{m: m, gpu: gpu, clock: clock}
}

// tick advances the clock by d and takes a sample.
func (r *testRig) tick(d time.Duration) {
	r.clock.Advance(d)
	r.m.Sample()
}

// settle ticks by step until every request the ledger tracks is final, or
// fails after the horizon plus a margin.
func (r *testRig) settle(t testing.TB) {
	t.Helper()
	for range int((r.m.cfg.horizon+time.Second)/step) + 2 {
		r.tick(step)
		if r.m.ledger.Active() == 0 {
			return
		}
	}
	t.Fatalf("%d requests still tracked past the horizon", r.m.ledger.Active())
}

// trueMJ is the simulated boards' true energy since their creation.
func (r *testRig) trueMJ() uint64 {
	var e uint64
	for i := range r.gpu.Devices() {
		e += r.gpu.TrueEnergyMJ(i)
	}
	return e
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

func newTracing(opts ...sdktrace.TracerProviderOption) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(sr)}, opts...)...)
	return sr, tp
}

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
	return points[float64](t, rm, name, key)
}

// intPoints is floatPoints for int64 sums and gauges.
func intPoints(t testing.TB, rm metricdata.ResourceMetrics, name string, key attribute.Key) map[string]int64 {
	t.Helper()
	return points[int64](t, rm, name, key)
}

// points reads a cumulative counter's or a gauge's points by the value of
// key; every sum this package exports is a cumulative counter.
func points[N int64 | float64](t testing.TB, rm metricdata.ResourceMetrics, name string, key attribute.Key) map[string]N {
	t.Helper()
	m, ok := findMetric(rm, name)
	if !ok {
		return nil
	}
	var pts []metricdata.DataPoint[N]
	switch d := m.Data.(type) {
	case metricdata.Sum[N]:
		if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
			t.Fatalf("%s: monotonic=%v temporality=%v, want a cumulative counter", name, d.IsMonotonic, d.Temporality)
		}
		pts = d.DataPoints
	case metricdata.Gauge[N]:
		pts = d.DataPoints
	default:
		t.Fatalf("%s has data %T", name, m.Data)
	}
	out := map[string]N{}
	for _, p := range pts {
		v, _ := p.Attributes.Value(key)
		out[v.Emit()] = p.Value
	}
	return out
}

// Ring0Len is the number of counter steps device 0's ring holds.
func (m *Monitor) Ring0Len() int {
	v, _ := m.view(0)
	return v.Len()
}

func mpNoop() *sdkmetric.MeterProvider { return sdkmetric.NewMeterProvider() }
