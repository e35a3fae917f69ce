package otelenergy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/otelenergy/otelenergy/internal/fakeclock"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/simgpu"
)

// clock is a manual clock, so the examples' output is deterministic.
type clock struct{ *fakeclock.Clock }

func newClock() clock { return clock{fakeclock.New(time.Unix(1_900_000_000, 0))} }

// gpu is an idealized simulated GPU: 100 W idle, 0.3 J per token.
func (c clock) gpu() *simgpu.GPU {
	g, _ := simgpu.New(simgpu.Idealized(simgpu.Config{IdleWatts: 100, Now: c.Now}))
	return g
}

// A counter of your own (DCGM, RAPL, a BMC) plugs in through NewFuncSource.
func ExampleNewFuncSource() {
	c := newClock()
	var counter uint64 = 5_000 // mJ, as the hardware reports it
	src, _ := otelenergy.NewFuncSource(
		[]otelenergy.Device{{ID: "bmc-0", Name: "Board", Vendor: "ACME", Type: "cpu"}},
		func(int) (uint64, error) { counter += 250; return counter, nil },
		nil)
	mon, _ := otelenergy.NewMonitor(src, otelenergy.WithClock(c.Now))
	defer mon.Shutdown(context.Background())
	for range 5 {
		c.Advance(otelenergy.DefaultInterval)
		mon.Sample()
	}
	fmt.Println(mon.Totals().EnergyMJ[0], "mJ")
	// Output: 1000 mJ
}

// The middleware sits inside otelhttp and puts each request's energy on its
// span: as the span ends, the intervals split so far plus an estimate of
// the last one, marked approximate. NewSpanExporter replaces it with the
// exact figure (here 103000 mJ: ten steps of 10 J idle and 0.3 J of tokens)
// once the counter has stepped past the request's end.
func ExampleNewMiddleware() {
	c := newClock()
	gpu := c.gpu()
	mon, _ := otelenergy.NewMonitor(gpu, otelenergy.WithClock(c.Now))
	defer mon.Shutdown(context.Background())
	mon.Sample() // a server calls mon.Start(); the example samples by hand

	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		job := gpu.Begin(0)
		defer job.End()
		for range 10 { // stream ten tokens over a second
			c.Advance(100 * time.Millisecond)
			job.Tokens(1)
			mon.AddTokens(r.Context(), 1)
			mon.Sample()
		}
	})
	h := otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(mux), "completions", otelhttp.WithTracerProvider(tp))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/completions", nil))

	for _, kv := range sr.Ended()[0].Attributes() {
		switch kv.Key {
		case otelenergy.EnergyMillijoulesKey, "gen_ai.usage.output_tokens", "otelenergy.energy.approximate":
			fmt.Println(kv.Key, kv.Value.Emit())
		}
	}
	// Output:
	// gen_ai.usage.output_tokens 10
	// energy.millijoules 103000
	// otelenergy.energy.approximate true
}

// A model hot-swap begins a new run, with a MeterProvider of its own whose
// resource carries the run's identity and whose figures start from zero.
func ExampleMonitor_RunMeterProvider() {
	c := newClock()
	mon, _ := otelenergy.NewMonitor(c.gpu(), otelenergy.WithClock(c.Now), otelenergy.WithModel("model-a"))
	defer mon.Shutdown(context.Background())
	mon.Sample()

	run := mon.BeginRun("model-b")
	rd := sdkmetric.NewManualReader()
	mp, _ := mon.RunMeterProvider(run, resource.Empty(), sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background()) // at the next swap: exports the run's final values

	for range 20 { // two idle seconds
		c.Advance(100 * time.Millisecond)
		mon.Sample()
	}
	var rm metricdata.ResourceMetrics
	rd.Collect(context.Background(), &rm)
	model, _ := rm.Resource.Set().Value("gen_ai.request.model")
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "otelenergy.run.energy" {
			fmt.Printf("%s: %.0f J\n", model.AsString(), m.Data.(metricdata.Sum[float64]).DataPoints[0].Value)
		}
	}
	// Output: model-b: 200 J
}
