package otelenergy

import (
	"context"
	"math"
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
// estimate the middleware set. Entries whose span never reaches the exporter
// (a RecordOnly sampling decision, a span dropped by a full batch queue, a
// span of another TracerProvider) are swept out after pendingHorizon, longer
// than a batch span processor holds a span before exporting it.
type pendingSpans struct {
	enabled atomic.Bool

	mu    sync.Mutex
	spans map[trace.SpanID]pendingSpan
	// wait is closed and cleared by the next sample; it exists only while
	// an exporter waits, so sampling allocates nothing otherwise.
	wait chan struct{}
}

// pendingHorizon is how long a registered span is kept for the exporter.
const pendingHorizon = time.Minute

// maxPendingSpans bounds the spans registered for the exporter at once.
const maxPendingSpans = 4096

// finalizeWait is how long, beyond one sampling interval, an export batch
// waits for the sample that finalizes its requests.
const finalizeWait = time.Second

type pendingSpan struct {
	r  *requestState
	at int64 // when the span was registered, on the Monitor's clock
}

// put records that span sid's exact energy arrives with r's finalization.
func (p *pendingSpans) put(sid trace.SpanID, r *requestState, now int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spans == nil {
		p.spans = make(map[trace.SpanID]pendingSpan)
	}
	if len(p.spans) < maxPendingSpans {
		p.spans[sid] = pendingSpan{r: r, at: now}
	}
}

func (p *pendingSpans) take(sid trace.SpanID) *requestState {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.spans[sid]
	if ok {
		delete(p.spans, sid)
	}
	return e.r
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

// wake releases the exporters waiting for this sample, and sweeps out the
// entries registered before cutoff.
func (p *pendingSpans) wake(cutoff int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wait != nil {
		close(p.wait)
		p.wait = nil
	}
	for sid, e := range p.spans {
		if e.at < cutoff {
			delete(p.spans, sid)
		}
	}
}

// flush releases every waiter for good; used on Shutdown.
func (p *pendingSpans) flush() { p.wake(math.MinInt64) }

// NewSpanExporter wraps next so that request spans carry their exact ledger
// energy rather than the estimate taken when they ended.
//
// In ledger mode the interval in which a request ends is split only at the
// next sample. The energy middleware and interceptors set an estimate
// (otelenergy.energy.approximate=true) on the span; with this exporter in
// the pipeline they also register the span, and ExportSpans holds the batch
// until that sample, at most one sampling interval plus one second per call
// and never past ctx's deadline, then replaces energy.millijoules with the
// exact figure and sets otelenergy.energy.approximate to whether the window
// was shorter than the counter's update period. When the sampler has
// stalled (no sample for two intervals) it does not wait. Spans that are
// not request spans, or whose request has not been finalized in time, pass
// through unchanged. At most 4096 spans are registered at once; beyond that
// spans keep their estimate. In window-share mode, or with a nil Monitor,
// it returns next itself.
//
// Use it inside the batch span processor, never a synchronous one: a
// synchronous processor exports in span.End, on the request's goroutine,
// and the wait would delay the request.
//
//	sdktrace.WithBatcher(otelenergy.NewSpanExporter(exp, mon))
func NewSpanExporter(next sdktrace.SpanExporter, m *Monitor) sdktrace.SpanExporter {
	if m == nil || m.ledger == nil {
		return next
	}
	m.pending.enabled.Store(true)
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
	var (
		out      []sdktrace.ReadOnlySpan
		deadline *time.Timer
	)
	for i, s := range spans {
		r := e.m.pending.take(s.SpanContext().SpanID())
		if r == nil {
			continue
		}
		if !r.finalized.Load() {
			if deadline == nil {
				deadline = time.NewTimer(e.m.cfg.interval + finalizeWait)
				defer deadline.Stop()
			}
			if !e.await(ctx, r, deadline.C) {
				continue
			}
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

// await waits until r is finalized, the batch's deadline passes or ctx
// ends. It does not wait on a sampler that has stalled.
func (e *spanExporter) await(ctx context.Context, r *requestState, deadline <-chan time.Time) bool {
	for !r.finalized.Load() {
		if e.m.now()-e.m.lastSample.Load() > 2*int64(e.m.cfg.interval) {
			return false
		}
		select {
		case <-e.m.pending.waiter():
		case <-deadline:
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
	approx := r.flushed || r.endT-r.start < int64(e.m.cfg.counterPeriod)
	stub.Attributes = append(attrs,
		EnergyMillijoulesKey.Int64(int64(min(e.m.ledger.finalMJ(r), 1<<63-1))),
		EnergyApproximateKey.Bool(approx))
	return stub.Snapshot()
}

// Shutdown shuts down the wrapped exporter.
func (e *spanExporter) Shutdown(ctx context.Context) error { return e.next.Shutdown(ctx) }
