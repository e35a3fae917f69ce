package otelenergy

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/otelenergy/internal/reqmodel"
)

// Request tracks one unit of work (an HTTP request, an RPC, a queue job) so
// that the energy metered while it ran can be attributed to it.
//
// A Request is a context.Context: it carries its parent's values, deadline
// and cancellation, plus itself, so handlers pass it on and
// [Monitor.AddTokens] finds it. Starting one costs two allocations and no
// lock; its token counters are atomics. End ends it; later calls to End
// report the same request again, as known then.
type Request struct {
	context.Context
	st *requestState
}

// requestState is what the ledger and the span exporter keep of a request
// after it ends. It is allocated apart from the Request so that holding it
// until its figure is final does not keep the request's context, and
// through it the HTTP request, alive.
type requestState struct {
	ledger.Request
	m       *Monitor
	run     *runInfo
	span    trace.SpanContext // immutable: read by the sampler at any time
	tracked bool              // handed to the ledger
	attrs   *requestAttrs     // immutable; nil without baggage attributes
	model   reqmodel.Slot     // the model the request names, once read
}

type requestKey struct{}

// Value returns the Request itself for its own key and defers every other
// key to the parent context.
func (r *Request) Value(key any) any {
	switch key {
	case requestKey{}:
		return r
	case reqmodel.Key{}:
		if r.st == nil {
			return (*reqmodel.Slot)(nil)
		}
		return &r.st.model
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
	// HasEnergy is false when no energy could be attributed: no samples
	// yet, a nil Monitor, or more requests at once than the ledger tracks.
	HasEnergy bool
	// Approximate is true while part of the figure is an estimate (the
	// intervals at the request's end are split only once the counter has
	// stepped past it and the requests active then have reported), and for
	// good when the request ran for less than the counter's update period,
	// ran on a shared device whose energy could not be split, or was
	// finalized by Shutdown, the horizon or its maximum age.
	Approximate bool
	// Shared is true when a device the request ran on is used by other
	// processes and its energy could not be split among them.
	Shared bool
	// OutputTokens and InputTokens are the tokens the request reported.
	OutputTokens, InputTokens uint64
	// RunID is the id of the run the request started in.
	RunID string
}

// StartRequest begins tracking a request whose context is ctx and returns
// it. Pass the returned Request (a context) to the handler, and call End
// when the request is done. It takes no lock, never blocks on the sampler
// and never fails: without samples, or on a nil Monitor, End reports no
// energy.
func (m *Monitor) StartRequest(ctx context.Context) *Request {
	if m == nil {
		return &Request{Context: ctx, st: &requestState{}}
	}
	st := &requestState{m: m, run: m.run.Load(), span: trace.SpanContextFromContext(ctx)}
	if m.bag != nil {
		st.attrs = m.bag.lookup(ctx, st.run)
	}
	st.Init(m.now(), st)
	// The ledger tracks requests only while something samples, so that a
	// Monitor nobody samples never accumulates them.
	if m.lastSample.Load() >= 0 && !m.shut.Load() {
		st.tracked = true
		m.ledger.Add(&st.Request)
	}
	return &Request{Context: ctx, st: st}
}

// End stops tracking r and returns what it cost as far as is known now:
// the energy of the intervals already split, plus an estimate of the rest
// from the ledger's model, marked approximate. The exact figure follows
// once the ledger has split the intervals at the request's end (see
// [NewSpanExporter]). End takes no lock and does not allocate.
func (r *Request) End() Result {
	st := r.st
	res := Result{OutputTokens: st.Output(), InputTokens: st.Input()}
	m := st.m
	if m == nil {
		return res
	}
	res.RunID = st.run.run.ID()
	if st.tracked {
		m.ledger.End(&st.Request, m.now())
	} else {
		st.Request.End(m.now())
	}
	end, _ := st.Ended()
	if !st.tracked || st.Flags()&ledger.FlagDropped != 0 {
		return res
	}
	final := st.Final() // before the estimate: a final figure is complete
	if !final && m.shut.Load() {
		// Added while Shutdown flushed the ledger: it will never be split.
		return res
	}
	res.EnergyMJ, res.HasEnergy = m.ledger.Estimate(&st.Request, end), true
	res.Approximate, res.Shared = st.approximate(m)
	if !final {
		// The ledger flags a shared device only as it splits; until
		// then, the devices' current state says.
		res.Approximate, res.Shared = true, res.Shared || m.sharedUnsplit()
	}
	return res
}

// sharedUnsplit reports whether a device is now shared with other
// processes without a measured split.
func (m *Monitor) sharedUnsplit() bool {
	for _, d := range m.devs {
		if s := d.share.Load(); s != nil && s.Shared && !s.Split {
			return true
		}
	}
	return false
}

// approximate says whether r's final figure is approximate, and whether
// it ran on a shared device.
func (st *requestState) approximate(m *Monitor) (approx, shared bool) {
	f := st.Flags()
	shared = f&ledger.FlagShared != 0
	end, _ := st.Ended()
	approx = f&(ledger.FlagExpired|ledger.FlagFlushed|ledger.FlagForced|ledger.FlagShared) != 0 ||
		end-st.Start() < m.counterPeriod()
	return approx, shared
}
