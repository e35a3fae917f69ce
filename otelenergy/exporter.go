package otelenergy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// pendingSpans holds, per span, the ledger request whose exact energy the
// span exporter waits for. It is bounded: past its limit a span keeps the
// estimate the middleware set.
type pendingSpans struct {
	enabled atomic.Bool

	mu    sync.Mutex
	limit int
	spans map[trace.SpanID]*requestState
	// wait is closed and cleared by the next sample; it exists only while
	// an exporter waits, so sampling allocates nothing otherwise.
	wait chan struct{}
}

func (p *pendingSpans) init(limit int) { p.limit = limit }

// put records that span sid's exact energy arrives with r's finalization.
func (p *pendingSpans) put(sid trace.SpanID, r *requestState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spans == nil {
		p.spans = make(map[trace.SpanID]*requestState)
	}
	if len(p.spans) < p.limit {
		p.spans[sid] = r
	}
}

func (p *pendingSpans) take(sid trace.SpanID) *requestState {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.spans[sid]
	if r != nil {
		delete(p.spans, sid)
	}
	return r
}

// waiter returns a channel closed by the next sample.
func (p *pendingSpans) waiter() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wait == nil {
		p.wait = make(chan struct{})
	}
	return p.wait
}

// wake releases the exporters waiting for this sample.
func (p *pendingSpans) wake() {
	p.mu.Lock()
	if p.wait != nil {
		close(p.wait)
		p.wait = nil
	}
	p.mu.Unlock()
}

// flush releases every waiter for good; used on Shutdown.
func (p *pendingSpans) flush() { p.wake() }

// NewSpanExporter wraps next so that request spans carry their exact ledger
// energy rather than the estimate taken when they ended.
//
// In ledger mode the interval in which a request ends is split only at the
// next sample. The energy middleware and interceptors set an estimate
// (otelenergy.energy.approximate=true) on the span; with this exporter in
// the pipeline they also register the span, and ExportSpans holds it until
// that sample, at most one sampling interval plus one second and never past
// ctx's deadline, then replaces energy.millijoules with the exact figure and
// sets otelenergy.energy.approximate to whether the window was shorter than
// the counter's update period. Spans that are not request spans, or whose
// request never got a sample, pass through unchanged. At most 4096 spans are
// held; beyond that spans keep their estimate. In window-share mode it
// passes spans through unchanged.
//
// Use it inside the batch span processor:
//
//	sdktrace.WithBatcher(otelenergy.NewSpanExporter(exp, mon))
func NewSpanExporter(next sdktrace.SpanExporter, m *Monitor) sdktrace.SpanExporter {
	if m.ledger != nil {
		m.pending.enabled.Store(true)
	}
	return &spanExporter{next: next, m: m}
}

type spanExporter struct {
	next sdktrace.SpanExporter
	m    *Monitor
}

var _ sdktrace.SpanExporter = (*spanExporter)(nil)

// ExportSpans finalizes request spans and passes every span to the wrapped
// exporter.
func (e *spanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if !e.m.pending.enabled.Load() {
		return e.next.ExportSpans(ctx, spans)
	}
	var out []sdktrace.ReadOnlySpan
	for i, s := range spans {
		r := e.m.pending.take(s.SpanContext().SpanID())
		if r == nil {
			continue
		}
		if !e.await(ctx, r) {
			continue
		}
		if out == nil {
			out = append([]sdktrace.ReadOnlySpan(nil), spans...)
		}
		out[i] = e.decorate(s, r)
	}
	if out == nil {
		out = spans
	}
	return e.next.ExportSpans(ctx, out)
}

// await waits until r is finalized, bounded by the sampling interval plus a
// second and by ctx.
func (e *spanExporter) await(ctx context.Context, r *requestState) bool {
	deadline := time.NewTimer(e.m.cfg.interval + e.m.cfg.finalizeWait)
	defer deadline.Stop()
	for !r.finalized.Load() {
		select {
		case <-e.m.pending.waiter():
		case <-deadline.C:
			return r.finalized.Load()
		case <-ctx.Done():
			return r.finalized.Load()
		}
	}
	return true
}

func (e *spanExporter) decorate(s sdktrace.ReadOnlySpan, r *requestState) sdktrace.ReadOnlySpan {
	stub := tracetest.SpanStubFromReadOnlySpan(s)
	attrs := make([]attribute.KeyValue, 0, len(stub.Attributes))
	for _, kv := range stub.Attributes {
		if kv.Key != EnergyMillijoulesKey && kv.Key != EnergyApproximateKey {
			attrs = append(attrs, kv)
		}
	}
	approx := r.endT-r.start < int64(e.m.cfg.counterPeriod)
	stub.Attributes = append(attrs,
		EnergyMillijoulesKey.Int64(int64(min(e.m.ledger.finalMJ(r), 1<<63-1))),
		EnergyApproximateKey.Bool(approx))
	return stub.Snapshot()
}

// Shutdown shuts down the wrapped exporter.
func (e *spanExporter) Shutdown(ctx context.Context) error { return e.next.Shutdown(ctx) }
