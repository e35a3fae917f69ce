package otelenergy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func BenchmarkAddTokens(b *testing.B) {
	b.Run("baseline", func(b *testing.B) {
		// The physical floor: one bare atomic add.
		var n atomic.Uint64
		b.ReportAllocs()
		for b.Loop() {
			n.Add(1)
		}
	})
	b.Run("request", func(b *testing.B) {
		r := newRig(b, SimulatedConfig{})
		r.m.Sample()
		req := r.m.StartRequest(context.Background())
		var ctx context.Context = req
		b.ReportAllocs()
		for b.Loop() {
			r.m.AddTokens(ctx, 1)
		}
		b.StopTimer()
		req.End()
	})
}

// dropExporter drops every span: the benchmarks measure the request path,
// not export.
type dropExporter struct{}

func (dropExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropExporter) Shutdown(context.Context) error                             { return nil }

// floorMiddleware is the least any per-request energy hook must do: carry
// one value in the request context and, after the handler returns, set one
// int64 attribute on the span.
type floorKey struct{}

type floorCtx struct {
	context.Context
	start int64
}

func (c *floorCtx) Value(k any) any {
	if k == (floorKey{}) {
		return c
	}
	return c.Context.Value(k)
}

func floorMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &floorCtx{Context: r.Context(), start: 1}
		next.ServeHTTP(w, r.WithContext(c))
		trace.SpanFromContext(c).SetAttributes(EnergyMillijoulesKey.Int64(c.start))
	})
}

func BenchmarkHandler(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(dropExporter{}))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	r := newRig(b, SimulatedConfig{}, WithMeterProvider(mp))
	for range 50 {
		r.m.AddTokens(context.Background(), 3)
		r.tick(100 * time.Millisecond)
	}
	var h http.HandlerFunc = func(w http.ResponseWriter, req *http.Request) {
		r.m.AddTokens(req.Context(), 1)
		w.WriteHeader(http.StatusOK)
	}
	cases := []struct {
		name string
		h    http.Handler
	}{
		{"otelhttp", otelhttp.NewHandler(h, "op", otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp))},
		{"floor", otelhttp.NewHandler(floorMiddleware(h), "op", otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp))},
		{"otelhttp+energy", otelhttp.NewHandler(NewMiddleware(r.m)(h), "op", otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp))},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/v1/completions", nil)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c.h.ServeHTTP(httptest.NewRecorder(), req)
				if i%1024 == 1023 {
					// Keep the ledger from growing: finalize ended requests.
					b.StopTimer()
					r.tick(100 * time.Millisecond)
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkSample is one sampler tick over 8 simulated GPUs.
func BenchmarkSample(b *testing.B) {
	r := newRig(b, SimulatedConfig{Devices: 8})
	r.m.Sample()
	b.ReportAllocs()
	for b.Loop() {
		r.tick(100 * time.Millisecond)
	}
}
