package ledger

import (
	"math"
	"sync/atomic"
)

// Account is the ledger's record of one request: the unit of work it
// attributes energy to, and the running balance of what it was given. It
// is not the public otelenergy.Request, which embeds one in the state it
// keeps for the ledger and the span exporter.
//
// Build it with [Account.Init], hand it to [Ledger.Add], report its tokens
// with [Account.AddOutput], [Account.AddInput] and [Account.AddCached]
// from any goroutine, and call [Ledger.End] once. Nothing on that path
// takes a lock or allocates: each call is one or two atomic operations on
// the request itself.
//
// The sampler adopts the request at its next [Ledger.Observe] and keeps
// its own timeline of it; once every interval the request was active in
// has been split, the request is final ([Account.Final]) and
// [Account.EnergyMJ] is its exact share.
type Account struct {
	// Data is the owner's payload, set before Add and never changed; the
	// ledger hands it back in the finalize callback.
	Data any

	start int64
	end   atomic.Int64 // notEnded until End
	out   atomic.Uint64
	in    atomic.Uint64
	// cached counts the input tokens the server served from its prefix
	// cache: a part of in, not added to it.
	cached atomic.Uint64
	// first packs the request's first output report as its caller
	// stamped it (StampFirstOutput): when, as ns since start plus one, in
	// the high 40 bits, and its tokens less one in the low 24. Zero until
	// stamped.
	first atomic.Uint64
	// chunk packs the request's latest report of more than one token as
	// its caller stamped it (StampChunk), as first does, with the output
	// count it brought the request to in place of its own tokens.
	chunk atomic.Uint64

	// Written by the sampler, read by anyone.
	mj      atomic.Uint64 // energy split to the request so far
	through atomic.Int64  // every device has split up to here
	final   atomic.Bool
	flags   atomic.Uint32
	next    *Account // inbox link, written before publication

	st  sampled  // owned by the sampler: next to what every pass reads
	est estimate // what Estimate reads, published by the sampler
}

// Flags say why a request's figure is approximate, or that it got none.
const (
	// FlagDropped: the ledger was full when the request started; it got
	// no energy.
	FlagDropped uint32 = 1 << iota
	// FlagExpired: the request was not ended within the maximum age and
	// stopped accruing then.
	FlagExpired
	// FlagFlushed: the ledger was flushed (shutdown) before the request's
	// last intervals were split.
	FlagFlushed
	// FlagForced: an interval of the request was split at the horizon,
	// before the request had reported past it.
	FlagForced
	// FlagShared: a device the request ran on is shared with other
	// processes and could not be split.
	FlagShared
	// FlagTimeForced: a ring of [Config.TimeRings] had not stepped past
	// the request's end for a horizon when it was finalized, so its
	// shares of those rings lack the time since their last point.
	FlagTimeForced
)

// newAccount returns the account of a request that started at t, in ns
// on the ledger's clock. [Account.Init] does the same for an Account
// embedded in a larger struct.
func newAccount(t int64, data any) *Account {
	r := &Account{}
	r.Init(t, data)
	return r
}

// Init prepares a zero Account for a request that started at t. It must
// be called before the account is used, and only once.
func (r *Account) Init(t int64, data any) {
	r.Data, r.start = data, t
	r.through.Store(t)
	r.end.Store(notEnded)
	r.est.thru.Store(t)
	r.est.pfEnd.Store(-1)
}

// notEnded marks a request whose End has not been called.
const notEnded = math.MinInt64

// Start returns the request's start time.
func (r *Account) Start() int64 { return r.start }

// retiredBit is set in a request's token counters when the ledger lets
// the request go (it is finalized, flushed or dropped): the ledger takes
// the counts below it into [Ledger.Tokens] in the same atomic operation,
// so every report is counted there exactly once, by the ledger when its
// add came first and by the caller when AddOutput or AddInput reports
// false.
const retiredBit = 1 << 63

// AddOutput counts n output tokens produced now. Safe from any goroutine;
// one atomic add. It reports whether the ledger counts them in
// [Ledger.Tokens]: false once the ledger has let the request go, and the
// caller then counts them elsewhere if it keeps totals.
func (r *Account) AddOutput(n uint64) bool {
	_, counted, _ := r.AddFirstOutput(n)
	return counted
}

// AddFirstOutput counts n output tokens as [Account.AddOutput] does, and
// also returns the request's output count after them and whether they are
// its first. The one caller that gets first then stamps them with
// [Account.StampFirstOutput]: a request's first output marks the end of
// its prefill, which the sampler would otherwise place only to within one
// of its reads. A report of more than one token is stamped too
// ([Account.StampChunk]): it hides when its tokens came, and its place
// sets how the request's tokens spread. So a clock is read once per
// request and once per chunk, not once per token.
func (r *Account) AddFirstOutput(n uint64) (total uint64, counted, first bool) {
	v := r.out.Add(n)
	return v &^ retiredBit, v&retiredBit == 0, v == n
}

// StampFirstOutput records that the request's first output report, of n
// tokens, was made at t. Call it only after [Account.AddFirstOutput]
// reported first. A report later than about 18 minutes after the
// request's start, or of more than 2²⁴ tokens, is not recorded: the
// sampler then places it at the read that saw it.
func (r *Account) StampFirstOutput(t int64, n uint64) {
	if v, ok := packStamp(t-r.start, n); ok {
		r.first.Store(v)
	}
}

// StampChunk records that a report of more than one output token, which
// brought the request's output to total, was made at t. A later stamp
// replaces it: the sampler places a read's reports at the stamp when the
// stamp's total is what the read saw, and at the read otherwise. Limits
// as for [Account.StampFirstOutput].
func (r *Account) StampChunk(t int64, total uint64) {
	if v, ok := packStamp(t-r.start, total); ok {
		r.chunk.Store(v)
	}
}

// chunkReport returns when the latest stamped chunk was reported and the
// output count it brought the request to, or total = 0 before a stamp.
func (r *Account) chunkReport() (t int64, total uint64) {
	return unpackStamp(r.start, r.chunk.Load())
}

// packStamp packs a stamp dt ns after the start, of a count n, into one
// word, and false when it does not fit.
func packStamp(dt int64, n uint64) (uint64, bool) {
	d := uint64(max(dt, 0)) + 1
	if d >= 1<<stampTimeBits || n == 0 || n > 1<<stampCountBits {
		return 0, false
	}
	return d<<stampCountBits | (n - 1), true
}

// unpackStamp is packStamp undone for a request that started at start:
// the stamp's time and count, or n = 0 for no stamp.
func unpackStamp(start int64, v uint64) (t int64, n uint64) {
	if v == 0 {
		return 0, 0
	}
	return start + int64(v>>stampCountBits) - 1, v&(1<<stampCountBits-1) + 1
}

// The bits of a stamp (Account.first, Account.chunk): the time since
// start, and the count.
const (
	stampCountBits = 24
	stampTimeBits  = 64 - stampCountBits
)

// firstOutput returns when the request's first output report was made
// and how many tokens it had, as stamped, or n = 0 before a stamp.
func (r *Account) firstOutput() (t int64, n uint64) {
	return unpackStamp(r.start, r.first.Load())
}

// AddInput counts n input tokens, as [Account.AddOutput] does.
func (r *Account) AddInput(n uint64) bool { return r.in.Add(n)&retiredBit == 0 }

// AddCached counts n of the request's input tokens as served from the
// server's prefix cache, as [Account.AddOutput] does. They are a part of
// the input tokens [Account.AddInput] counts, not more of them: the
// ledger charges prefill for the others only.
func (r *Account) AddCached(n uint64) bool { return r.cached.Add(n)&retiredBit == 0 }

// Cached returns the cached input tokens reported so far, at most
// [Account.Input].
func (r *Account) Cached() uint64 { return min(r.cached.Load()&^retiredBit, r.Input()) }

// Output returns the output tokens reported so far.
func (r *Account) Output() uint64 { return r.out.Load() &^ retiredBit }

// Input returns the input tokens reported so far.
func (r *Account) Input() uint64 { return r.in.Load() &^ retiredBit }

// uncached returns the input tokens reported so far that the server
// prefilled: those not served from its prefix cache.
func (r *Account) uncached() uint64 { return r.Input() - r.Cached() }

// End marks the request ended at t. Only the first call counts, even
// among concurrent calls; it must follow every AddOutput and AddInput of
// the request in the goroutine that calls it, or be ordered after them by
// the caller. It is one compare-and-swap. For a request handed to
// [Ledger.Add], [Ledger.End] does the same and counts the end for the
// estimates of the requests still running.
func (r *Account) End(t int64) { r.end.CompareAndSwap(notEnded, max(t, r.start)) }

// Ended reports whether End was called, and the end time.
func (r *Account) Ended() (int64, bool) {
	e := r.end.Load()
	return e, e != notEnded
}

// Final reports whether the request's figure is final.
func (r *Account) Final() bool { return r.final.Load() }

// EnergyMJ returns the energy split to the request so far; once
// [Account.Final] is true it is the request's exact share.
func (r *Account) EnergyMJ() uint64 { return r.mj.Load() }

// FirstToken returns when the request's first output token was produced,
// as the ledger placed it (one decode step after the end of its
// prefill), and false when it produced none. It is for the sampler side,
// such as the finalize callback: the request path must not call it.
func (r *Account) FirstToken() (int64, bool) {
	if r.st.pfEnd < 0 || r.Output() == 0 {
		return 0, false
	}
	return r.st.pfEnd + r.st.step, true
}

// Flags returns the request's Flag bits.
func (r *Account) Flags() uint32 { return r.flags.Load() }

func (r *Account) setFlag(f uint32) { r.flags.Or(f) }
