package otelenergy

import (
	"context"
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/otelenergy/otelenergy/ledger"
)

// pendingSpans holds, per span, the request whose exact energy the span
// exporter waits for. It is sharded by span id, so registering a span takes
// one of many small locks, never one shared by every request. It is
// bounded: past its limit a span keeps the estimate the middleware set.
// Entries whose span never reaches the exporter (a RecordOnly sampling
// decision, a span dropped by a full batch queue, a span of another
// TracerProvider) are swept out after pendingHorizon.
type pendingSpans struct {
	enabled atomic.Bool
	shards  [pendingShards]pendingShard

	mu        sync.Mutex
	lastSweep atomic.Int64 // the sampler's, and Shutdown's while a hung sampler may still wake
	// wait is closed and cleared by the next sample that finalizes
	// requests; it exists only while an exporter waits, so sampling
	// allocates nothing otherwise.
	wait chan struct{}
}

type pendingShard struct {
	mu    sync.Mutex
	spans map[trace.SpanID]pendingSpan
	_     [40]byte
}

const (
	pendingShards = 32
	// pendingHorizon is how long a registered span is kept for the
	// exporter: beyond the ledger's horizon and a batch processor's delay.
	pendingHorizon = 2 * time.Minute
	// maxPendingPerShard bounds the spans registered at once.
	maxPendingPerShard = 4096
	// sweepEvery is how often stale entries are swept out.
	sweepEvery = time.Second
	// finalizeSlack is how long, beyond the horizon, an export batch waits
	// for its requests' figures.
	finalizeSlack = time.Second
)

type pendingSpan struct {
	r  *requestState
	at int64 // when the span was registered, on the Monitor's clock
}

func (p *pendingSpans) shard(sid trace.SpanID) *pendingShard {
	return &p.shards[binary.LittleEndian.Uint64(sid[:])%pendingShards]
}

// put records that span sid's exact energy arrives with r's finalization.
func (p *pendingSpans) put(sid trace.SpanID, r *requestState, now int64) {
	s := p.shard(sid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spans == nil {
		s.spans = make(map[trace.SpanID]pendingSpan)
	}
	if len(s.spans) < maxPendingPerShard {
		s.spans[sid] = pendingSpan{r: r, at: now}
	}
}

func (p *pendingSpans) take(sid trace.SpanID) *requestState {
	s := p.shard(sid)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.spans[sid]
	if ok {
		delete(s.spans, sid)
	}
	return e.r
}

// waiter returns a channel closed by the next sample that finalizes
// requests.
func (p *pendingSpans) waiter() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wait == nil {
		p.wait = make(chan struct{})
	}
	return p.wait
}

// wake releases the exporters waiting at now, and at most every
// sweepEvery sweeps out the entries registered before now − pendingHorizon.
// The sampler calls it, and Shutdown through flush.
func (p *pendingSpans) wake(now int64) {
	if !p.enabled.Load() {
		return
	}
	p.mu.Lock()
	if p.wait != nil {
		close(p.wait)
		p.wait = nil
	}
	p.mu.Unlock()
	if now != math.MinInt64 && now-p.lastSweep.Load() < int64(sweepEvery) {
		return
	}
	p.lastSweep.Store(now)
	cutoff := now - int64(pendingHorizon)
	if now == math.MinInt64 {
		cutoff = math.MaxInt64
	}
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		for sid, e := range s.spans {
			if e.at < cutoff {
				delete(s.spans, sid)
			}
		}
		s.mu.Unlock()
	}
}

// flush releases every waiter for good; used on Shutdown.
func (p *pendingSpans) flush() {
	p.enabled.Store(true)
	p.wake(math.MinInt64)
}

// NewSpanExporter wraps next so that request spans carry their exact
// energy rather than the estimate taken when they ended.
//
// The ledger splits the intervals at a request's end only once the counter
// has stepped past it and the requests active then have reported past it,
// which takes up to the horizon (see [WithHorizon]). The energy middleware
// and interceptors set an estimate (otelenergy.energy.approximate=true) on
// the span; with this exporter in the pipeline they also register the
// span, and ExportSpans holds the batch until those requests are final, at
// most the horizon plus a second per call and never past ctx's deadline,
// then replaces energy.millijoules with the exact figure and
// otelenergy.energy.approximate with whether the figure is still
// approximate for good (see [Result]). When the sampler has stalled it
// does not wait. Spans that are not request spans, or whose request is not
// final in time, pass through unchanged. With a nil Monitor it returns
// next itself.
//
// Use it inside a batch span processor, never a synchronous one: a
// synchronous processor exports in span.End, on the request's goroutine,
// and the wait would delay the request. docs/instrumenting.md sizes the
// batch processor's queue and export timeout for a given request rate.
//
//	sdktrace.WithBatcher(otelenergy.NewSpanExporter(exp, mon))
func NewSpanExporter(next sdktrace.SpanExporter, m *Monitor) sdktrace.SpanExporter {
	if m == nil {
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
		if !r.Final() {
			if deadline == nil {
				deadline = time.NewTimer(e.m.cfg.horizon + e.m.cfg.interval + finalizeSlack)
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

// await waits until r is final, the batch's deadline passes or ctx ends.
// It does not wait on a sampler that has stalled.
func (e *spanExporter) await(ctx context.Context, r *requestState, deadline <-chan time.Time) bool {
	for !r.Final() {
		if e.m.shut.Load() || e.m.now()-e.m.lastSample.Load() > 4*int64(e.m.cfg.interval)+int64(time.Second) {
			return r.Final()
		}
		select {
		case <-e.m.pending.waiter():
		case <-deadline:
			return r.Final()
		case <-ctx.Done():
			return r.Final()
		}
	}
	return true
}

// finalSpan is a request span with its exact energy: the read-only span
// itself, with its attributes replaced.
type finalSpan struct {
	sdktrace.ReadOnlySpan
	attrs []attribute.KeyValue
}

func (s finalSpan) Attributes() []attribute.KeyValue { return s.attrs }

func (e *spanExporter) decorate(s sdktrace.ReadOnlySpan, r *requestState) sdktrace.ReadOnlySpan {
	old := s.Attributes()
	attrs := make([]attribute.KeyValue, 0, len(old)+2+hostClasses)
	for _, kv := range old {
		if kv.Key != EnergyMillijoulesKey && kv.Key != approximateKey && kv.Key != sharedKey && kv.Key != co2eKey && !isHostKey(kv.Key) {
			attrs = append(attrs, kv)
		}
	}
	approx, shared := r.approximate(e.m)
	attrs = append(attrs,
		EnergyMillijoulesKey.Int64(int64(min(r.EnergyMJ(), 1<<63-1))),
		approximateKey.Bool(approx))
	if shared {
		attrs = append(attrs, sharedKey.Bool(true))
	}
	if c := e.m.co2; c != nil {
		// r is final: its µg are complete.
		if ug, ok := c.requestCo2e(r.co2UG.Load(), r.co2Flags.Load(), true, 0, 0); ok {
			attrs = append(attrs, co2eKey.Float64(float64(ug)/1000))
		}
	}
	attrs = e.m.appendHostAttrs(attrs, r)
	return finalSpan{ReadOnlySpan: s, attrs: attrs}
}

// Shutdown shuts down the wrapped exporter.
func (e *spanExporter) Shutdown(ctx context.Context) error { return e.next.Shutdown(ctx) }

// finalize is the ledger's callback for a request whose figure became
// final: it records the request-energy histogram (with WithCarbon, the
// request-emissions histogram beside it, under the same attributes plus
// the intensity's source and kind), and with
// WithGenAIMetrics the GenAI server metrics, in the context of the
// request's span, so that their exemplars link to the trace.
func (m *Monitor) finalize(lr *ledger.Account) {
	st, ok := lr.Data.(*requestState)
	if !ok {
		return
	}
	if st.Output() == 0 && st.Input() == 0 && st.EnergyMJ() == 0 {
		// Nothing to record; embodied emissions of its device time (on a
		// shared device whose share was 0) go to unattributed, so that
		// the emissions identity still holds.
		if c := m.co2; c != nil {
			if ug := st.co2UG.Load(); ug != 0 {
				c.unattributed.Add(ug)
			}
		}
		return
	}
	ctx := context.Background()
	if st.span.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, st.span)
	}
	opt := st.run.recordOpt
	if st.attrs != nil {
		opt = st.attrs.recordOpt
	}
	if model := st.model.Get(); model != "" {
		opt = m.models.recordOpt(st.run, st.attrs, model)
	}
	m.inst.requestEnergy.Record(ctx, float64(st.EnergyMJ())/1000, opt)
	if c := m.co2; c != nil {
		if r := st.reading(c); r != nil {
			// The options go in the state's own one-element slice: a
			// variadic argument to an interface method would escape and
			// cost an allocation per request.
			c.recOpts[0] = c.recordOpt(opt, r)
			m.inst.requestCo2e.Record(ctx, float64(st.co2UG.Load())/1e6, c.recOpts[:]...)
		}
	}
	m.recordHost(ctx, st, opt)
	end, ended := st.Ended()
	if g := m.inst.genai; g != nil && ended && st.Output() > 0 && st.Flags()&(ledger.FlagFlushed|ledger.FlagExpired) == 0 {
		g.Duration.Inst().Record(ctx, time.Duration(end-st.Start()).Seconds(), st.run.genaiOpt)
		if first, ok := lr.FirstToken(); ok {
			g.TTFT.Inst().Record(ctx, time.Duration(first-st.Start()).Seconds(), st.run.genaiOpt)
			if n := st.Output(); n > 1 {
				g.TPOT.Inst().Record(ctx, time.Duration(end-first).Seconds()/float64(n-1), st.run.genaiOpt)
			}
		}
	}
}
