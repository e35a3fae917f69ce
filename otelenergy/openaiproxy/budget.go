package openaiproxy

import "sync/atomic"

// Budget bounds the bytes that requests in flight hold in memory at once,
// all of them together: a bound on each body alone does not bound their
// sum. The proxy takes from it what it holds of a response (a body it
// reads, or one it rebuilds from an upstream stream, [WithUpstreamStreaming]),
// and a stage in front can take from the same Budget what it holds of
// request bodies, so that one figure bounds both. The zero value holds
// nothing; create one with [NewBudget]. It is safe for concurrent use.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a Budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// Take reserves n bytes and reports whether they fit; bytes that do not
// fit are not reserved.
func (b *Budget) Take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// Give returns n bytes reserved with Take.
func (b *Budget) Give(n int64) { b.used.Add(-n) }

// budgetStep is how much of a Budget a response reserves at a time.
const budgetStep = 64 << 10

// reservation is what one exchange holds of a Budget: the request body
// it rewrote, and what it holds of the response. It is used by the
// goroutine serving the exchange.
type reservation struct {
	b    *Budget
	held int64
	// base is held for the exchange's life, beneath what cover covers:
	// the rewritten request body, which the transport reads until the
	// backend has it.
	base int64
}

// hold reserves n more bytes for the exchange's life, beneath what cover
// covers, and reports whether the Budget had them.
// It takes exactly n, not a whole budgetStep: a small body held for a
// long stream must not crowd other requests out of the Budget.
func (r *reservation) hold(n int64) bool {
	if !r.b.Take(n) {
		return false
	}
	r.held += n
	r.base += n
	return true
}

// cover makes the reservation at least n bytes beyond base and reports
// whether the Budget had them.
func (r *reservation) cover(n int64) bool {
	n += r.base
	if n <= r.held {
		return true
	}
	need := (n - r.held + budgetStep - 1) / budgetStep * budgetStep
	if !r.b.Take(need) {
		return false
	}
	r.held += need
	return true
}

// release gives back all that is held.
func (r *reservation) release() {
	if r.held > 0 {
		r.b.Give(r.held)
		r.held = 0
	}
	r.base = 0
}
