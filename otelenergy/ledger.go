package otelenergy

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// Attribution selects how metered energy is divided among requests.
type Attribution int

const (
	// AttributionLedger splits each sample interval's energy among the
	// requests active in it, by the tokens each produced in that interval.
	// It conserves energy exactly: the requests' energy plus the
	// unattributed energy equals the metered energy, in integer mJ. It is
	// the default, because it measured more accurate (see docs/attribution.md).
	AttributionLedger Attribution = iota
	// AttributionWindowShare gives a request its token share of the energy
	// metered over its own [start, end] window. With overlapping requests of
	// different lengths it double-counts or misses energy.
	AttributionWindowShare
)

// String returns "ledger" or "windowshare".
func (a Attribution) String() string {
	switch a {
	case AttributionLedger:
		return "ledger"
	case AttributionWindowShare:
		return "windowshare"
	}
	return fmt.Sprintf("Attribution(%d)", int(a))
}

// WithAttribution selects the attribution mode. The default is
// [AttributionLedger].
func WithAttribution(a Attribution) Option {
	return optionFunc(func(c *config) { c.attribution = a })
}

// LedgerWeights weighs token types against each other when the ledger splits
// an interval's dynamic energy. Only their ratio matters.
//
// The ledger splits each interval's energy in two parts. The static part,
// the idle power (see [WithIdlePower]) times the interval, is shared among
// the requests active in the interval by how long each was active in it. The
// rest, the dynamic part, is shared by weighted tokens produced in the
// interval. Requests that report no tokens (embeddings, images) therefore
// still get a time share of the static part, and in an interval in which no
// tokens were produced the dynamic part too is split by time. Energy goes to
// otelenergy.energy.unattributed when no request was active, and in the
// token share of tokens reported outside any request.
type LedgerWeights struct {
	// Output is the weight of one output (decode) token.
	Output float64
	// Input is the weight of one input (prompt, prefill) token. Prefill
	// processes a prompt's tokens in parallel, so each costs a fraction of
	// a decode step.
	Input float64
}

// defaultLedgerWeights counts an input token as a tenth of an output token.
var defaultLedgerWeights = LedgerWeights{Output: 1, Input: 0.1}

// weightScale turns float weights into fixed point, so the split is exact
// integer arithmetic.
const weightScale = 1024

func (w LedgerWeights) validate() error {
	for _, v := range []float64{w.Output, w.Input} {
		if v < 0 || v > 1e6 || math.IsNaN(v) {
			return fmt.Errorf("%w: ledger weights must be in [0, 1e6], got %+v", ErrInvalidConfig, w)
		}
	}
	if math.Round(w.Output*weightScale) == 0 && math.Round(w.Input*weightScale) == 0 {
		return fmt.Errorf("%w: ledger weights are all zero", ErrInvalidConfig)
	}
	return nil
}

// WithLedgerWeights sets the ledger's per-token-type weights. The default
// is Output 1, Input 0.1.
func WithLedgerWeights(w LedgerWeights) Option {
	return optionFunc(func(c *config) { c.ledgerWeights = w })
}

// ledger attributes energy sample by sample.
//
// Invariant: the energy given to requests plus unattributed equals the
// energy metered since the first sample, exactly. Each interval's ΔE is
// split by cumulative rounding over the active list in start order, so the
// shares telescope to exactly floor(ΔE·W_req/W) and the remainder, the part
// earned by tokens no tracked request reported, goes to unattributed.
type ledger struct {
	wOut, wIn uint64

	mu      sync.Mutex
	active  []*requestState // in start order; ended ones stay until the next sample
	final   []*requestState // scratch for requests finalized by a step
	primed  bool
	lastT   int64
	lastE   uint64
	lastOut uint64
	lastIn  uint64
	mjPerNs float64 // power over the last interval

	// idle is the static power in mJ/ns: set by WithIdlePower, or learned
	// from intervals in which no request ran and no token was reported.
	idle      float64
	idleKnown bool
	idleFixed bool
	tok, tim  []uint64 // scratch weights, parallel to active

	unattributed atomic.Uint64
}

// idleEWMA is the weight of each new idle interval in the learned static
// power: about the last ten idle samples count.
const idleEWMA = 0.1

// split gives e to the active requests in proportion to w out of total,
// by cumulative rounding, and returns what it gave: floor(e·Σw/total).
// total must be at least Σw.
func (l *ledger) split(e uint64, w []uint64, total uint64) uint64 {
	if e == 0 || total == 0 {
		return 0
	}
	var cum, given uint64
	for i, r := range l.active {
		cum += w[i]
		s := mulDiv(e, cum, total)
		r.ledgerMJ += s - given
		given = s
	}
	return given
}

// maxActive bounds the ledger when samples stop coming: a request started
// beyond it gets no energy rather than unbounded memory.
const maxActive = 1 << 16

func newLedger(c config) *ledger {
	l := &ledger{
		wOut: uint64(math.Round(c.ledgerWeights.Output * weightScale)),
		wIn:  uint64(math.Round(c.ledgerWeights.Input * weightScale)),
	}
	if c.idleSet {
		l.idle, l.idleKnown, l.idleFixed = c.idleWatts*wattsToMJPerNs, true, true
	}
	return l
}

// wattsToMJPerNs converts W (J/s) to mJ/ns.
const wattsToMJPerNs = 1e3 / 1e9

// WithIdlePower sets the devices' static power, in W summed over all of
// them, that the ledger splits among active requests by time rather than by
// tokens. By default it is learned from intervals in which no request ran
// and no token was reported (an exponentially weighted mean over about the
// last ten), and is zero until the first such interval: then all energy is
// split by tokens. WithIdlePower(0) always splits all energy by tokens.
// Negative or non-finite values make NewMonitor fail with
// [ErrInvalidConfig].
func WithIdlePower(watts float64) Option {
	return optionFunc(func(c *config) { c.idleWatts, c.idleSet = watts, true })
}

func (l *ledger) add(r *requestState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.active) >= maxActive {
		return
	}
	r.idx = len(l.active)
	r.lastOut, r.lastIn = r.out.Load(), r.in.Load()
	l.active = append(l.active, r)
}

// weight is the fixed-point weight of dOut output and dIn input tokens,
// saturating rather than wrapping.
func (l *ledger) weight(dOut, dIn uint64) uint64 {
	hi1, a := bits.Mul64(l.wOut, dOut)
	hi2, b := bits.Mul64(l.wIn, dIn)
	s, carry := bits.Add64(a, b, 0)
	if hi1|hi2|carry != 0 || s > 1<<62 {
		return 1 << 62
	}
	return s
}

// mulDiv returns a·b/c for b ≤ c without overflow.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// step splits the energy metered since the previous sample. It is called by
// the sampler with the new totals, and returns the requests it finalized;
// the slice is valid until the next call.
func (l *ledger) step(t int64, energy, gOut, gIn uint64) []*requestState {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.primed {
		l.primed = true
		l.lastT, l.lastE, l.lastOut, l.lastIn = t, energy, gOut, gIn
		return nil
	}
	dE := satSub(energy, l.lastE)
	dt := t - l.lastT
	if dt > 0 {
		l.mjPerNs = float64(dE) / float64(dt)
	}
	n := len(l.active)
	if cap(l.tok) < n {
		l.tok = make([]uint64, n, cap(l.active))
		l.tim = make([]uint64, n, cap(l.active))
	}
	tok, tim := l.tok[:n], l.tim[:n]
	var wTok, wTime uint64
	for i, r := range l.active {
		o, in := r.out.Load(), r.in.Load()
		tok[i] = l.weight(o-r.lastOut, in-r.lastIn)
		r.lastOut, r.lastIn = o, in
		from, to := max(r.start, l.lastT), t
		if r.ended {
			to = min(r.endT, t)
		}
		tim[i] = uint64(max(0, to-from))
		wTok += tok[i]
		wTime += tim[i]
	}
	gTok := max(wTok, l.weight(gOut-l.lastOut, gIn-l.lastIn))
	if n == 0 && gTok == 0 && dt > 0 && !l.idleFixed {
		// Nothing ran: this interval's power is the static power.
		if !l.idleKnown {
			l.idle, l.idleKnown = l.mjPerNs, true
		} else {
			l.idle += idleEWMA * (l.mjPerNs - l.idle)
		}
	}
	// The static part is shared by active time out of at least the whole
	// interval, so the time in it when no request ran stays unattributed.
	static := min(dE, uint64(l.idle*float64(max(dt, 0))))
	given := l.split(static, tim, max(wTime, uint64(max(dt, 0))))
	if gTok > 0 {
		given += l.split(dE-static, tok, gTok)
	} else {
		given += l.split(dE-static, tim, wTime)
	}
	l.unattributed.Add(dE - given)

	// Finalize the requests that ended during the interval, keeping start
	// order for the rest.
	final := l.final[:0]
	kept := 0
	for _, r := range l.active {
		if r.ended {
			r.idx = -1
			r.finalized.Store(true)
			final = append(final, r)
			continue
		}
		r.idx = kept
		l.active[kept] = r
		kept++
	}
	clear(l.active[kept:])
	l.active = l.active[:kept]
	l.final = final
	l.lastT, l.lastE, l.lastOut, l.lastIn = t, energy, gOut, gIn
	return final
}

// end marks r ended at t and returns its energy so far plus an estimate of
// its share of the interval in progress, whether it has energy, and whether
// part of it is estimated. gOut and gIn are the current token totals.
func (l *ledger) end(r *requestState, t int64, gOut, gIn uint64) (mj uint64, ok, estimated bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.idx < 0 {
		return 0, false, false
	}
	r.ended, r.endT = true, t
	if !l.primed {
		return 0, false, false
	}
	wr := l.weight(r.out.Load()-r.lastOut, r.in.Load()-r.lastIn)
	wg := max(wr, l.weight(gOut-l.lastOut, gIn-l.lastIn))
	mj = r.ledgerMJ
	if t > l.lastT {
		// The interval in progress: a time share of the static power, and
		// a token share of the rest at the last interval's power.
		est := l.idle * float64(t-max(r.start, l.lastT)) / float64(len(l.active))
		if wr > 0 {
			est += max(0, l.mjPerNs-l.idle) * float64(t-l.lastT) * float64(wr) / float64(wg)
		}
		mj += uint64(est)
		estimated = est > 0
	}
	return mj, true, estimated
}

// finalMJ returns r's final ledger energy. It is meaningful once
// r.finalized is true.
func (l *ledger) finalMJ(r *requestState) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return r.ledgerMJ
}

// flush finalizes every tracked request with what it has and returns them;
// Shutdown calls it so that nothing waits for a sample that will not come.
// Their last partial interval is never split, so they are marked
// approximate. The slice is valid until the next step or flush.
func (l *ledger) flush() []*requestState {
	l.mu.Lock()
	defer l.mu.Unlock()
	final := l.final[:0]
	for _, r := range l.active {
		r.idx = -1
		r.flushed = true
		r.finalized.Store(true)
		final = append(final, r)
	}
	clear(l.active)
	l.active = l.active[:0]
	l.final = final
	return final
}

// recordFinal records the final energy of requests the ledger finalized on
// the request-energy histogram, in the context of their spans so that the
// exemplars link to the traces.
func (m *Monitor) recordFinal(final []*requestState) {
	for i, r := range final {
		if r.out.Load() > 0 || r.in.Load() > 0 || r.ledgerMJ > 0 {
			ctx := context.Background()
			if r.spanCtx.IsValid() {
				ctx = trace.ContextWithSpanContext(ctx, r.spanCtx)
			}
			m.inst.requestEnergy.Record(ctx, float64(r.ledgerMJ)/1000, r.run.recordOpt)
		}
		final[i] = nil
	}
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
