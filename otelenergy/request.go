package otelenergy

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/otelenergy/otelenergy/ring"
)

// Request tracks one unit of work (an HTTP request, an RPC, a queue job) so
// that the energy metered while it ran can be attributed to it.
//
// A Request is a context.Context: it carries its parent's values, deadline
// and cancellation, plus itself, so handlers pass it on and
// [Monitor.AddTokens] finds it. It is built once per request, which costs two
// allocations. Its token counters are safe for concurrent use; End must be
// called exactly once, by the goroutine that started it.
type Request struct {
	context.Context
	m   *Monitor
	seq uint64 // ring.Written() at start
	*requestState
}

// requestState is what the ledger and the span exporter keep of a request
// after it ends. It is allocated apart from the Request so that holding it
// until the next sample does not keep the request's context, and through it
// the HTTP request and the span, alive.
type requestState struct {
	run   *runInfo
	start int64
	out   atomic.Uint64
	in    atomic.Uint64

	// Ledger state, guarded by the ledger's mutex.
	idx       int // index in the ledger's active list; -1 when not in it
	lastOut   uint64
	lastIn    uint64
	ledgerMJ  uint64
	ended     bool
	flushed   bool // finalized by Shutdown without its last interval
	endT      int64
	spanCtx   trace.SpanContext
	finalized atomic.Bool
}

type requestKey struct{}

// Value returns the Request itself for its own key and defers every other
// key to the parent context.
func (r *Request) Value(key any) any {
	if key == (requestKey{}) {
		return r
	}
	return r.Context.Value(key)
}

// requestFrom returns the Request ctx carries, or nil.
func requestFrom(ctx context.Context) *Request {
	if r, ok := ctx.(*Request); ok {
		return r
	}
	if ctx == nil {
		return nil
	}
	r, _ := ctx.Value(requestKey{}).(*Request)
	return r
}

// RequestFromContext returns the Request that ctx carries, or nil.
func RequestFromContext(ctx context.Context) *Request { return requestFrom(ctx) }

// Result is what a Request cost.
type Result struct {
	// EnergyMJ is the energy attributed to the request, in whole
	// millijoules. It is meaningful only when HasEnergy is true.
	EnergyMJ uint64
	// HasEnergy is false when no energy could be attributed: no source, no
	// samples yet, or (window-share) a window that saw no tokens.
	HasEnergy bool
	// Samples is the number of counter samples taken while the request ran.
	Samples int
	// Approximate is true when the request's window was shorter than the
	// counter's update period, or an edge of it was estimated.
	Approximate bool
	// OutputTokens and InputTokens are the tokens the request reported.
	OutputTokens, InputTokens uint64
}

// StartRequest begins tracking a request whose context is ctx and returns
// it. Pass the returned Request (a context) to the handler, and call End
// when the request is done. Starting a request never blocks on the sampler
// and never fails: without samples, or on a nil Monitor, End reports no
// energy.
func (m *Monitor) StartRequest(ctx context.Context) *Request {
	if m == nil {
		return &Request{Context: ctx, requestState: &requestState{idx: -1}}
	}
	r := &Request{Context: ctx, m: m, seq: m.ring.Written(),
		requestState: &requestState{run: m.run.Load(), start: m.now(), idx: -1}}
	// The ledger tracks requests only while something samples, so that a
	// Monitor nobody samples never accumulates them.
	if m.ledger != nil && m.lastSample.Load() >= 0 && !m.shut.Load() {
		m.ledger.add(r.requestState)
	}
	return r
}

// OutputTokens returns the output tokens reported on r so far.
func (r *Request) OutputTokens() uint64 { return r.out.Load() }

// InputTokens returns the input tokens reported on r so far.
func (r *Request) InputTokens() uint64 { return r.in.Load() }

// RunID returns the id of the run the request started in, or "" for a
// request started on a nil Monitor.
func (r *Request) RunID() string {
	if r.run == nil {
		return ""
	}
	return r.run.run.ID()
}

// End stops tracking r and returns what it cost as far as is known now.
//
// In window-share mode that is final. In ledger mode the interval in which
// the request ended is split at the next sample; End estimates the request's
// part of it from the latest power and marks the result approximate, and the
// exact figure follows at the next sample (see [NewSpanExporter]).
func (r *Request) End() Result {
	m := r.m
	if m == nil {
		return Result{OutputTokens: r.out.Load(), InputTokens: r.in.Load()}
	}
	end := m.now()
	res := Result{
		OutputTokens: r.out.Load(),
		InputTokens:  r.in.Load(),
		Samples:      int(m.ring.Written() - r.seq),
		Approximate:  end-r.start < int64(m.cfg.counterPeriod),
	}
	if m.ledger != nil {
		r.spanCtx = trace.SpanContextFromContext(r.Context)
		mj, ok, estimated := m.ledger.end(r.requestState, end, m.outTokens.Load(), m.inTokens.Load())
		res.EnergyMJ, res.HasEnergy = mj, ok
		res.Approximate = res.Approximate || estimated
		return res
	}
	w, ok := m.ring.Window(r.start, end)
	if !ok {
		return res
	}
	res.Samples = w.Samples
	res.EnergyMJ, res.HasEnergy = ring.Share(w.EnergyMJ(), w.Tokens(), res.OutputTokens)
	return res
}
