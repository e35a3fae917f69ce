package otelenergy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestNilMonitor checks that a service whose Monitor could not be built
// serves normally: every entry point accepts a nil *Monitor.
func TestNilMonitor(t *testing.T) {
	var m *Monitor
	ctx := context.Background()
	m.AddTokens(ctx, 3)
	m.AddInputTokens(ctx, 3)
	req := m.StartRequest(ctx)
	m.AddTokens(req, 1)
	if res := req.End(); res.HasEnergy || req.RunID() != "" {
		t.Fatalf("nil Monitor request: %+v, run %q", res, req.RunID())
	}
	inmem := tracetest.NewInMemoryExporter()
	if got := NewSpanExporter(inmem, m); got != sdktrace.SpanExporter(inmem) {
		t.Fatalf("NewSpanExporter(exp, nil) = %T, want exp itself", got)
	}
	served := false
	h := NewMiddleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.AddTokens(r.Context(), 1)
		served = true
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if !served {
		t.Fatal("handler not served")
	}
}

// readOnlySpan builds an ended span with the given span ID.
func readOnlySpan(t *testing.T, tp *sdktrace.TracerProvider) sdktrace.ReadOnlySpan {
	t.Helper()
	_, s := tp.Tracer("t").Start(context.Background(), "req")
	s.End()
	return s.(sdktrace.ReadOnlySpan)
}

// TestSpanExporterDoesNotWaitOnStalledSampler ends request spans and then
// stops sampling: ExportSpans must pass them on without holding the batch.
func TestSpanExporterDoesNotWaitOnStalledSampler(t *testing.T) {
	rig := newRig(t, SimulatedConfig{})
	rig.m.Sample()
	tp := sdktrace.NewTracerProvider()
	inmem := tracetest.NewInMemoryExporter()
	exp := NewSpanExporter(inmem, rig.m)
	var spans []sdktrace.ReadOnlySpan
	for range 5 {
		req := rig.m.StartRequest(context.Background())
		rig.m.AddTokens(req, 2)
		req.End()
		s := readOnlySpan(t, tp)
		rig.m.pending.put(s.SpanContext().SpanID(), req.requestState, rig.m.now())
		spans = append(spans, s)
	}
	rig.clock.Advance(time.Second) // ten intervals without a sample
	start := time.Now()
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("ExportSpans held the batch %v with the sampler stalled", d)
	}
	if n := len(inmem.GetSpans()); n != 5 {
		t.Fatalf("exported %d spans, want 5", n)
	}
}

// TestPendingSpansSweep checks that spans that never reach the exporter
// (here: registered, never exported) do not fill the table for good.
func TestPendingSpansSweep(t *testing.T) {
	rig := newRig(t, SimulatedConfig{})
	rig.m.Sample()
	NewSpanExporter(tracetest.NewInMemoryExporter(), rig.m)
	for i := range maxPendingSpans + 10 {
		req := rig.m.StartRequest(context.Background())
		req.End()
		rig.m.pending.put(trace.SpanID{byte(i), byte(i >> 8), 1}, req.requestState, rig.m.now())
	}
	count := func() int {
		rig.m.pending.mu.Lock()
		defer rig.m.pending.mu.Unlock()
		return len(rig.m.pending.spans)
	}
	if n := count(); n != maxPendingSpans {
		t.Fatalf("%d pending spans, want the limit %d", n, maxPendingSpans)
	}
	rig.tick(pendingHorizon + time.Second)
	if n := count(); n != 0 {
		t.Fatalf("%d pending spans left after the horizon", n)
	}
}

// TestShutdownDoesNotWaitOnHungRead shuts down while a device read hangs:
// Shutdown returns at its context's deadline, and the source is closed once
// the read returns.
func TestShutdownDoesNotWaitOnHungRead(t *testing.T) {
	release := make(chan struct{})
	closed := make(chan struct{})
	reads := 0
	src, err := NewFuncSource([]Device{{ID: "d"}}, func(int) (uint64, error) {
		reads++
		if reads == 3 {
			<-release
		}
		return uint64(reads) * 100, nil
	}, func() error { close(closed); return nil })
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMonitor(src, WithInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the sampler is stuck in its third read
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := m.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Shutdown took %v past a 50 ms context", d)
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("source not closed after the hung read returned")
	}
}

// TestShutdownFinalizesEndedRequests ends a request between samples and
// shuts down: the last sample gives it its final, exact figure.
func TestShutdownFinalizesEndedRequests(t *testing.T) {
	rig := newRig(t, SimulatedConfig{})
	rig.m.Sample()
	req := rig.m.StartRequest(context.Background())
	rig.m.AddTokens(req, 5)
	rig.tick(100 * time.Millisecond)
	rig.m.AddTokens(req, 5)
	rig.clock.Advance(50 * time.Millisecond)
	req.End()
	rig.clock.Advance(50 * time.Millisecond)
	if err := rig.m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !req.finalized.Load() || req.flushed {
		t.Fatalf("finalized=%v flushed=%v; want finalized by a last sample", req.finalized.Load(), req.flushed)
	}
	// Alone on the GPU, it earned every millijoule of both intervals.
	if got, want := req.ledgerMJ, rig.m.Totals().TotalEnergyMJ(); got != want {
		t.Fatalf("final energy %d mJ, metered %d mJ", got, want)
	}
}
