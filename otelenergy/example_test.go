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

	"github.com/otelenergy/otelenergy/otelenergy"
)

// clock is a manual clock, so the examples' output is deterministic.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time          { return c.t }
func (c *clock) Advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_900_000_000, 0)} }
func (c *clock) sim(n int) *otelenergy.SimulatedSource {
	src, _ := otelenergy.NewSimulatedSource(otelenergy.SimulatedConfig{Devices: n, IdleWatts: 100, Now: c.Now})
	return src
}

// A counter of your own (DCGM, RAPL, a BMC) plugs in through NewFuncSource.
func ExampleNewFuncSource() {
	var counter uint64 = 5_000 // mJ, as the hardware reports it
	src, _ := otelenergy.NewFuncSource(
		[]otelenergy.Device{{ID: "bmc-0", Name: "Board", Vendor: "ACME"}},
		func(int) (uint64, error) { counter += 250; return counter, nil },
		nil)
	mon, _ := otelenergy.NewMonitor(src)
	defer mon.Shutdown(context.Background())
	for range 5 {
		mon.Sample()
	}
	fmt.Println(mon.Totals().EnergyMJ[0], "mJ")
	// Output: 1000 mJ
}

// The middleware sits inside otelhttp and puts each request's energy on its
// span.
func ExampleNewMiddleware() {
	c := newClock()
	mon, _ := otelenergy.NewMonitor(c.sim(1), otelenergy.WithClock(c.Now))
	defer mon.Shutdown(context.Background())
	mon.Sample() // a server calls mon.Start(); the example samples by hand

	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 10 { // stream ten tokens over a second
			c.Advance(100 * time.Millisecond)
			mon.AddTokens(r.Context(), 1)
			mon.Sample()
		}
	})
	h := otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(mux), "completions", otelhttp.WithTracerProvider(tp))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/completions", nil))

	for _, kv := range sr.Ended()[0].Attributes() {
		switch kv.Key {
		case otelenergy.EnergyMillijoulesKey, otelenergy.OutputTokensKey, otelenergy.EnergySamplesKey:
			fmt.Println(kv.Key, kv.Value.Emit())
		}
	}
	// Output:
	// gen_ai.usage.output_tokens 10
	// energy.millijoules 103000
	// otelenergy.energy.samples 10
}

// A model hot-swap begins a new run. The process-cumulative hw.energy keeps
// climbing on the main provider, while each run's own MeterProvider, whose
// resource carries the run's identity, starts from zero.
func ExampleMonitor_BeginRun() {
	c := newClock()
	main := sdkmetric.NewManualReader()
	mon, _ := otelenergy.NewMonitor(c.sim(1), otelenergy.WithClock(c.Now), otelenergy.WithModel("model-a"),
		otelenergy.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(main))))
	defer mon.Shutdown(context.Background())
	mon.Sample()

	runProvider := func() (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
		rd := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd), sdkmetric.WithResource(mon.Run().Resource()))
		mon.RegisterRunMetrics(mp, mon.Run())
		return mp, rd
	}
	sum := func(rd *sdkmetric.ManualReader, name string) float64 {
		var rm metricdata.ResourceMetrics
		rd.Collect(context.Background(), &rm)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == name {
					return m.Data.(metricdata.Sum[float64]).DataPoints[0].Value
				}
			}
		}
		return -1
	}
	idle := func(d time.Duration) {
		for range d / (100 * time.Millisecond) {
			c.Advance(100 * time.Millisecond)
			mon.Sample()
		}
	}

	mpA, runA := runProvider()
	idle(2 * time.Second)
	fmt.Printf("model-a: run %.0f J, hw.energy %.0f J\n", sum(runA, otelenergy.MetricRunEnergy), sum(main, otelenergy.MetricEnergy))

	mon.BeginRun("model-b")
	mpA.Shutdown(context.Background()) // exports model-a's final values
	_, runB := runProvider()
	idle(time.Second)
	fmt.Printf("model-b: run %.0f J, hw.energy %.0f J\n", sum(runB, otelenergy.MetricRunEnergy), sum(main, otelenergy.MetricEnergy))
	res := resource.NewSchemaless(mon.Run().Attributes()...)
	fmt.Println(res.Len(), "resource attributes: otelenergy.run.id and gen_ai.request.model")
	// Output:
	// model-a: run 200 J, hw.energy 200 J
	// model-b: run 100 J, hw.energy 300 J
	// 2 resource attributes: otelenergy.run.id and gen_ai.request.model
}
