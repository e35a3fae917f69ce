package otelenergy

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/otelenergy/internal/reqcarbon"
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
	ledger.Account
	m     *Monitor
	run   *runInfo
	span  trace.SpanContext // immutable: read by the sampler at any time
	attrs *requestAttrs     // immutable; nil without baggage attributes
	model reqmodel.Slot     // the model the request names, once read

	// With WithCarbon: the µg of the intervals split so far and the co2
	// flags, written by the sampler (co2State.convertSplit) before it
	// marks the request final; and the reading of its last interval that
	// had one, sampler-only.
	co2UG    atomic.Uint64
	co2Flags atomic.Uint32
	// tracked: handed to the ledger. It sits beside co2Flags, in what
	// would be padding, so that the state stays in its size class.
	tracked bool
	co2Last *carbon.Reading

	host *hostBalance // with WithHostSource; immutable
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
	case reqcarbon.Key{}:
		return r.st != nil && r.st.m != nil && r.st.m.co2 != nil
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
	// finalized by Shutdown, the horizon or its maximum age. With
	// [WithCarbon] it is also true when an interval that gave the request
	// energy had no intensity known for its time.
	Approximate bool
	// Shared is true when a device the request ran on is used by other
	// processes and its energy could not be split among them.
	Shared bool
	// OutputTokens and InputTokens are the tokens the request reported.
	OutputTokens, InputTokens uint64
	// CachedInputTokens is how many of InputTokens the request reported
	// as served from the server's prefix cache
	// ([Monitor.AddCachedInputTokens]), at most InputTokens.
	CachedInputTokens uint64
	// RunID is the id of the run the request started in.
	RunID string
	// Co2eMicrograms is the request's emissions in µg CO2e: its energy
	// times the PUE and the grid's intensity over the intervals it ran in,
	// each interval at the intensity in force when it was metered, plus
	// its share of embodied emissions by device time. Before the figure
	// is final, the energy not split yet is converted at the intensity in
	// force now (operational emissions only), like the energy estimate.
	// It is meaningful only when HasCo2e is true, which needs [WithCarbon]
	// and an intensity in force during the request or now.
	Co2eMicrograms uint64
	// HasCo2e is true when Co2eMicrograms carries a figure.
	HasCo2e bool
	// CPUMJ and MemoryMJ are the request's shares, in whole millijoules,
	// of the host's CPU and memory energy (hw.type cpu and memory), with
	// [WithHostSource]: the attributed processes' share of it by CPU
	// time, split among concurrent requests by time. EnergyMJ stays the
	// accelerator's. Each is meaningful only when HasCPU or HasMemory is
	// true, which needs HasEnergy and a host device of that type; before
	// the figure is final it is estimated as EnergyMJ is.
	CPUMJ, MemoryMJ   uint64
	HasCPU, HasMemory bool
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
	st := m.newRequestState()
	st.m, st.run, st.span = m, m.run.Load(), trace.SpanContextFromContext(ctx)
	if m.bag != nil {
		st.attrs = m.bag.lookup(ctx, st.run)
	}
	st.Init(m.now(), st)
	// The ledger tracks requests only while something samples, so that a
	// Monitor nobody samples never accumulates them.
	if m.lastSample.Load() >= 0 && !m.shut.Load() {
		st.tracked = true
		m.ledger.Add(&st.Account)
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
	if m := st.m; m != nil {
		if st.tracked {
			m.ledger.End(&st.Account, m.now())
		} else {
			st.Account.End(m.now())
		}
	}
	return r.result(st.Final()) // final before the estimate: a final figure is complete
}

// WaitFinal waits until r's figure is final, ctx ends, or the sampler is
// found stalled or shut down, and returns what r cost: the final figure
// when it became final in time (Approximate then says only whether the
// figure itself is approximate: see [Result]), and otherwise End's
// estimate as of now, marked approximate. Call it after [Request.End]; before
// End it returns End's figure without ending r. It is for a caller that
// can hold its answer a little, such as a proxy that sends the figure in
// a trailer: with ctx bounded by a deadline, it returns the final figure
// when the ledger settles before it and the estimate otherwise. Every
// client that streams makes the figure final about a counter period after
// the end; a client that reports only at its end can hold it up to the
// horizon (see [WithHorizon]). Safe from any goroutine; it allocates
// nothing while the figure is final at the call.
func (r *Request) WaitFinal(ctx context.Context) Result {
	st := r.st
	m := st.m
	if m == nil || !st.tracked {
		return r.result(false)
	}
	if _, ended := st.Ended(); !ended {
		return r.result(false)
	}
	if !st.Final() {
		// The sampler wakes waiters only while something waits.
		m.pending.enabled.Store(true)
	}
	for !st.Final() {
		if m.shut.Load() || m.now()-m.lastSample.Load() > 4*int64(m.cfg.interval)+int64(time.Second) {
			break
		}
		select {
		case <-m.pending.waiter():
		case <-ctx.Done():
			return r.result(st.Final())
		}
	}
	return r.result(st.Final())
}

// result is what r cost as known now: its final figure with final, which
// the caller loaded (true) before, and its estimate at its end otherwise.
func (r *Request) result(final bool) Result {
	st := r.st
	res := Result{OutputTokens: st.Output(), InputTokens: st.Input(), CachedInputTokens: st.Cached()}
	m := st.m
	if m == nil {
		return res
	}
	res.RunID = st.run.run.ID()
	if !st.tracked || st.Flags()&ledger.FlagDropped != 0 {
		return res
	}
	end, ended := st.Ended()
	if !ended {
		end = m.now()
	}
	if !final && m.shut.Load() {
		return res
	}
	// The emissions are loaded before the energy: the sampler adds an
	// interval's mJ before its µg, so an interval split meanwhile is left
	// out of the estimate's unsplit part rather than counted in both.
	var ug, splitMJ uint64
	if m.co2 != nil {
		ug = st.co2UG.Load()
		splitMJ = st.EnergyMJ()
	}
	res.EnergyMJ, res.HasEnergy = m.ledger.Estimate(&st.Account, end), true
	m.hostResult(&res, st, final, end)
	res.Approximate, res.Shared = st.approximate(m)
	if !final {
		res.Approximate, res.Shared = true, res.Shared || m.sharedUnsplit()
	}
	if c := m.co2; c != nil {
		res.Co2eMicrograms, res.HasCo2e = c.requestCo2e(ug, st.co2Flags.Load(), final, splitMJ, res.EnergyMJ)
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
	approx = f&(ledger.FlagExpired|ledger.FlagFlushed|ledger.FlagForced|ledger.FlagShared|ledger.FlagTimeForced) != 0 ||
		end-st.Start() < m.counterPeriod() ||
		st.co2Flags.Load()&(co2Unknown|co2Met) == co2Unknown|co2Met
	return approx, shared
}
