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
// Build it with [NewAccount], hand it to [Ledger.Add], report its tokens
// with [Account.AddOutput] and [Account.AddInput] from any goroutine, and
// call [Account.End] once. Nothing on that path takes a lock or allocates:
// each call is one or two atomic operations on the request itself.
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

	// Written by the sampler, read by anyone.
	mj      atomic.Uint64 // energy split to the request so far
	through atomic.Int64  // every device has split up to here
	final   atomic.Bool
	flags   atomic.Uint32
	next    *Account // inbox link, written before publication

	st sampled // owned by the sampler

	// The sampler's estimate as of its last Settle: estMJ is the split
	// part plus a provisional split of the intervals pushed but not yet
	// split; powPrice holds two float32s, its recent power in W (low bits)
	// and the modelled energy of one of its output tokens in J (high).
	// From its last report: seenRate holds the output tokens seen (low
	// 32 bits) and the rate, tokens per ns as a float32 (high), at which
	// the rest are taken to come from extFrom on.
	estMJ    atomic.Uint64
	powPrice atomic.Uint64
	seenRate atomic.Uint64
	extFrom  atomic.Int64
	// pfIn holds two float32s: the part of estMJ that was its prefill's
	// in mJ (low bits), and the prompt length in tokens that part was
	// weighed for while its prompt was not reported (high; 0 when it
	// was), so that a prompt reported late reprices it (see Estimate).
	// pfTF holds the length of the prefill placed for it then, in s
	// (low), and its mean share of the prefill pool over it (high).
	pfIn atomic.Uint64
	pfTF atomic.Uint64
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

// NewAccount returns the account of a request that started at t, in ns
// on the ledger's clock. [Account.Init] does the same for an Account
// embedded in a larger struct.
func NewAccount(t int64, data any) *Account {
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
func (r *Account) AddOutput(n uint64) bool { return r.out.Add(n)&retiredBit == 0 }

// AddInput counts n input tokens, as [Account.AddOutput] does.
func (r *Account) AddInput(n uint64) bool { return r.in.Add(n)&retiredBit == 0 }

// AddCached counts n of the request's input tokens as served from the
// server's prefix cache, as [Account.AddOutput] does. They are a part of
// the input tokens [Account.AddInput] counts, not more of them.
func (r *Account) AddCached(n uint64) bool { return r.cached.Add(n)&retiredBit == 0 }

// Cached returns the cached input tokens reported so far, at most
// [Account.Input].
func (r *Account) Cached() uint64 { return min(r.cached.Load()&^retiredBit, r.Input()) }

// Output returns the output tokens reported so far.
func (r *Account) Output() uint64 { return r.out.Load() &^ retiredBit }

// Input returns the input tokens reported so far.
func (r *Account) Input() uint64 { return r.in.Load() &^ retiredBit }

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
// as the ledger placed it (the end of its prefill), and false when it
// produced none. It is for the sampler side, such as the finalize
// callback: the request path must not call it.
func (r *Account) FirstToken() (int64, bool) {
	if r.st.pfEnd < 0 || r.Output() == 0 {
		return 0, false
	}
	return r.st.pfEnd + r.st.step, true
}

// Flags returns the request's Flag bits.
func (r *Account) Flags() uint32 { return r.flags.Load() }

func (r *Account) setFlag(f uint32) { r.flags.Or(f) }

// Estimate returns the request's energy up to t as well as it is known
// now: the energy split to it so far, the sampler's provisional split of
// the intervals pushed but not yet split (with the current model, prefill
// and decode included), its recent power for the time after the newest
// counter step, and the model's energy per output token for the tokens
// it reported after the sampler last looked. It is lock-free and
// allocates nothing.
func (l *Ledger) Estimate(r *Account, t int64) uint64 {
	// final is loaded first: the sampler adds to mj before it stores
	// final, so a final request's mj is complete.
	if r.final.Load() {
		return r.mj.Load()
	}
	mj := r.mj.Load()
	est := max(mj, r.estMJ.Load())
	thru := max(l.provThru.Load(), r.through.Load(), r.start)
	var add float64
	if t > thru {
		w := float64(math.Float32frombits(uint32(r.powPrice.Load())))
		// wN is how many requests w was a share among, when it is known.
		wN := 0.0
		if w <= 0 {
			// Nothing split or weighed for it yet: a share of the recent
			// power.
			wN = float64(max(1, l.activeN.Load()))
			w = math.Float64frombits(l.avgW.Load()) / wN
		}
		// The static power is shared by time among the requests active
		// at each instant, so the request's share of it moves with their
		// number: n0 at thru, n1 now (itself included). Its share at
		// thru, static/n0, is taken out of w, and the static part of
		// (thru, t] priced at static/n(s) integrated over a profile of
		// n(s) that matches the ends' count and mean time (staticTime).
		// The rest of w, the request's dynamic power, is carried as it
		// was.
		if static := math.Float64frombits(l.coef[fStatic].Load()); static > 0 {
			pn := l.provN.Load()
			n0 := float64(max(1, uint32(pn)))
			n1, ends, endOff := l.runningNow()
			// The ends in (thru, t]: those the last settle saw after
			// provThru, and those counted since, with their times.
			pThru, liveT := l.provThru.Load(), l.liveT.Load()
			thruEnded, thruOff := int64(uint32(pn>>32)), l.provOff.Load()
			if e, ended := r.Ended(); ended {
				// The request ran until t: it is among the running, not
				// among the ends that thin them out. Its own end was
				// counted with the others (Ledger.End), after the last
				// settle or, before it, among those of the requests
				// active at provThru; counted as an end too, it made n0
				// one more than there were when it started after
				// provThru (a lone request's static power halved) and
				// pulled the ends' mean time towards t.
				n1++
				switch {
				case e > liveT && ends > 0:
					ends--
					endOff -= e - liveT
				case r.start < pThru && e > pThru && thruEnded > 0:
					thruEnded--
					thruOff -= e - pThru
				}
			}
			k := float64(thruEnded) + float64(ends)
			if thru > pThru {
				// provN counts the requests active at provThru, not at
				// thru: this request, and any that started with it, came
				// later. At thru at least those running now and those
				// that ended since were active.
				n0 = max(n0, float64(max(1, n1))+k)
			}
			// w holds the request's static share at thru: static/n0, or
			// static/wN for a share of the recent power.
			share := n0
			if wN > 0 {
				share = wN
			}
			var mean float64
			if k > 0 {
				mean = (float64(thruOff) + float64(thruEnded)*float64(pThru-thru) +
					float64(endOff) + float64(ends)*float64(liveT-thru)) / k
			}
			tau := float64(t - thru)
			sec := staticTime(tau, n0, float64(max(1, n1)), k, mean) / tau
			w = max(0, w-static/share) + static*sec
		}
		add += w * float64(t-thru) / 1e6
	}
	// The provisional split and the power above count the tokens after
	// the request's last report at its rate; the tokens it reported
	// beyond (or short of) that cost the model's energy per output token.
	seen, rate := unpackSeenRate(r.seenRate.Load())
	tokens := float64(r.Output()) - float64(seen)
	tokens -= rate * float64(max(0, t-r.extFrom.Load()))
	price := float64(math.Float32frombits(uint32(r.powPrice.Load() >> 32)))
	if price <= 0 {
		price = math.Float64frombits(l.jOutBits.Load())
	}
	if out := float64(r.Output()); seen == 0 && tokens > 0 && out > 0 {
		// A request that reports its output only at its end: its tokens
		// beyond those extrapolated say it decoded faster than taken,
		// not that the board drew more, so they cost at most its power
		// over the time its tokens came in, per token. The price from
		// the provisional split can be far above that while the
		// batch's rate is young and few tokens are extrapolated (the
		// decode pool over them). A streaming request's own tokens
		// priced its share: it keeps that price.
		if w := float64(math.Float32frombits(uint32(r.powPrice.Load()))); w > 0 {
			span := float64(t - max(r.extFrom.Load(), r.start))
			if span > 0 {
				price = min(price, w*span/nsPerSecond/out)
			}
		}
	}
	pf, inHat := unpackPair(r.pfIn.Load())
	tf := r.pfTF.Load()
	if tHat, share := unpackPair(tf); seen == 0 && tokens < 0 && pf > 0 && tHat > 0 {
		// Fewer tokens than were extrapolated for it since its expected
		// prefill end, and a prompt whose prefill runs past that end:
		// the time taken for those tokens was its prefill's, on the
		// board all the same. Their energy stays (it is not priced away
		// as tokens it never made), and the prefill's part is repriced
		// below for the length it was given, not its prompt's, which
		// would count the time past it twice. Priced away, a long prompt
		// with a short answer lost its prefill's energy with them, and
		// End's estimate fell to a third of it.
		if th, ok := l.prefillCoefs(); ok && r.Input() > 0 {
			ext := prefillSeconds(th, float64(r.Input())) - tHat
			if ext > 0 {
				tokens = min(0, tokens+rate*ext*nsPerSecond)
				tf = packPair(-tHat, share)
			}
		}
	}
	tokAdd := price * tokens * 1000
	if seen == 0 && tokAdd < 0 {
		// What the rest take back is at most the part it was given
		// beyond its prefill's, which paid for them.
		tokAdd = max(tokAdd, -max(0, float64(est-mj)-pf))
	}
	add += tokAdd
	// A prompt reported after the sampler last weighed the request (a
	// client that reports its usage only at its end) was weighed as the
	// recent prompts were: its prefill's part is repriced for the prompt
	// it reported. The split shares a prefill pool by input-token rate,
	// so over its prefill a request's share goes with its prompt's
	// tokens, whatever its prefill's length.
	if pf > 0 && inHat > 0 {
		if in := float64(r.Input()); in > 0 {
			add += pf * (l.repricePrefill(in, inHat, tf) - 1)
		}
	}
	switch {
	case add >= 0:
		return est + uint64(min(add, 1<<62))
	case -add >= float64(est-mj):
		return mj
	default:
		return est - uint64(-add)
	}
}

// repricePrefill returns how many times its prefill's part a request
// that reported a prompt of in tokens gets, against what it was given
// weighed as a prompt of inHat tokens over a prefill of |tHat| s with a
// mean share f of the prefill pool (tf packs tHat and f; tHat < 0 when
// its own first token placed the prefill). The pool is shared by
// input-token rate: over its prefill, of T s, the request's rate is
// ρ = in/T against the others' R = ρ̂(1−f)/f, where ρ̂ = inHat/|tHat|, so
// its part goes from |tHat|·f to T·ρ/(ρ+R) of the pool's power. T is the
// placed prefill's length when its first token placed it, and otherwise
// the prefill time learned for the prompt (a + b·n + c·n²). In a crowd
// of prefills that is in/inHat, the prompt's tokens; alone, the
// prefill's time. Without a prefill time it is in/inHat.
func (l *Ledger) repricePrefill(in, inHat float64, tf uint64) float64 {
	ratio := in / inHat
	tHat, f := unpackPair(tf)
	T := -tHat
	if tHat > 0 {
		T = 0
		if th, ok := l.prefillCoefs(); ok {
			T = prefillSeconds(th, in)
		}
	}
	if T > 0 && f > 0 {
		f = min(f, 1)
		rho, others := in/T, inHat/math.Abs(tHat)*(1-f)/f
		ratio = T * rho / (rho + others) / (math.Abs(tHat) * f)
	}
	return min(max(ratio, 0), maxPromptRatio)
}

// staticTime returns ∫ ds/n(s) over a span of tau ns in which the number
// of requests goes from n0 to n1 (both positive) through k ends whose mean
// time is mean ns into the span: n(s) goes linearly from n0 to n1 over a
// part of the span whose midpoint is that mean time, and stays n0 before
// it or n1 after it. For ends spread evenly over the span that is the
// mean of 1/n for n linear, ln(n0/n1)/(n0−n1) per ns; ends bunched at
// the span's end leave most of it at n0.
func staticTime(tau, n0, n1, k, mean float64) float64 {
	if math.Abs(n0-n1) < 1e-9*n0 {
		return tau / n0
	}
	inv := math.Log(n0/n1) / (n0 - n1) // the mean of 1/n, n linear from n0 to n1
	if k <= 0 || tau <= 0 || math.IsNaN(mean) {
		return tau * inv
	}
	f := min(max(mean/tau, 0), 1)
	if f >= 0.5 {
		lin := 2 * (1 - f) * tau
		return (tau-lin)/n0 + lin*inv
	}
	lin := 2 * f * tau
	return lin*inv + (tau-lin)/n1
}

// point is one observed report: the cumulative counts first seen at a read,
// placed at the estimated report time t.
type point struct {
	t       int64
	out, in uint64
}

// sampled is the sampler's own view of a request.
type sampled struct {
	pts     []point
	known   int64 // the latest report time; every interval up to it is known
	pfEnd   int64 // one decode step before the first output token; -1 unknown
	step    int64 // that decode step, ns
	endSeen bool
	pfGuess bool    // pfEnd is a guess (see pfIn), in endSeen's word
	powW    float32 // the power last given to the request, W
	end     int64
	firstN  uint64 // tokens of a first report that was a chunk, until the next report places the prefill
	firstT  int64
	// inline holds the first points, so that a short request's timeline
	// costs no allocation of its own.
	inline [2]point
	// escTok is the output tokens the request was taken to produce, while
	// silent, in intervals split at the horizon (escrowed), and escHi the
	// end of the last of them; see Ledger.Escrow. They are last, out of
	// the fields every sampler pass reads.
	escTok float64
	escHi  int64
	// pfMJ sums the prefill part of the energy split to it, and inHat is
	// the prompt length its prefill was weighed for while its prompt was
	// not reported (0 once it is); see Account.pfIn.
	pfMJ  float64
	inHat float64
	tHat  float64 // s
	// pfS and pfT sum, over the intervals split, its rate-weighted share
	// of the prefill time and its time in prefill, ns: their ratio is its
	// mean share of the prefill pool.
	pfS, pfT float64
	// With pfGuess, no timing placed the prefill: pfEnd is guessed from
	// the prompt, pfIn tokens, at the ledger's prefill time per token,
	// within [start, pfMax]; pfBase is the even share's end (see
	// prefillrate.go). Last, with the fields a pass does not read.
	pfIn          float64
	pfBase, pfMax int64
	// actS0 is the ledger's actS as if the requests running at the read
	// that adopted it had run since its start (see Ledger.batchAt).
	actS0 float64
}

// maxPromptRatio bounds how many times the prefill part weighed for an
// assumed prompt a reported prompt may make it: prompts differ by two
// orders of magnitude, the prefill part of one weighed before its prompt
// was known is too rough a base to scale further.
const maxPromptRatio = 20

// packPair packs two non-negative figures as float32s into one word, so
// that a reader loads them as a pair.
func packPair(lo, hi float64) uint64 {
	return uint64(math.Float32bits(float32(lo))) | uint64(math.Float32bits(float32(hi)))<<32
}

// unpackPair undoes packPair.
func unpackPair(v uint64) (float64, float64) {
	return float64(math.Float32frombits(uint32(v))), float64(math.Float32frombits(uint32(v >> 32)))
}

// packSeenRate packs tokens seen and a rate in tokens per ns into one
// word, so that a reader loads them as a pair.
func packSeenRate(seen uint64, rate float64) uint64 {
	return uint64(uint32(min(seen, math.MaxUint32))) | uint64(math.Float32bits(float32(rate)))<<32
}

// unpackSeenRate undoes packSeenRate.
func unpackSeenRate(v uint64) (uint64, float64) {
	return uint64(uint32(v)), float64(math.Float32frombits(uint32(v >> 32)))
}

// ownRate returns the request's output tokens per ns since its prefill,
// as reported, or 0 before its prefill is placed for good.
func (s *sampled) ownRate() float64 {
	if s.pfEnd < 0 || s.firstN > 0 || len(s.pts) == 0 {
		return 0
	}
	last := s.pts[len(s.pts)-1]
	if last.t <= s.pfEnd || last.out == 0 {
		return 0
	}
	return float64(last.out) / float64(last.t-s.pfEnd)
}

// activeIn reports whether the request was active in (a, b].
func (s *sampled) activeIn(start, a, b int64) bool {
	return start < b && (!s.endSeen || s.end > a)
}

// span returns the request's active span clipped to (a, b].
func (s *sampled) span(start, a, b int64) (int64, int64) {
	lo, hi := max(start, a), b
	if s.endSeen {
		hi = min(hi, s.end)
	}
	return lo, max(lo, hi)
}

// prefillEnd returns the end of the prefill, shift decode steps after
// pfEnd (see fit.shift), or -1 when it is not placed.
func (s *sampled) prefillEnd(shift float64) int64 {
	if s.pfEnd < 0 {
		return -1
	}
	return s.shifted(s.pfEnd, shift)
}

// shifted returns the prefill end e moved shift decode steps later,
// within the request.
func (s *sampled) shifted(e int64, shift float64) int64 {
	e += int64(shift * float64(s.step))
	if s.endSeen {
		e = min(e, s.end)
	}
	return e
}

// prefill returns the prefill window [start, end]; with no output seen
// yet it runs to horizonEnd.
func (s *sampled) prefill(start, horizonEnd int64, shift float64) (int64, int64) {
	switch {
	case s.pfEnd >= 0:
		return start, s.prefillEnd(shift)
	case s.endSeen:
		return start, s.end
	default:
		return start, max(start, horizonEnd)
	}
}

// outputIn returns the output tokens produced in (a, b], spreading each
// report's tokens evenly since the previous report, and the first report's
// since pfEnd, the end of prefill (-1 when not placed).
func (s *sampled) outputIn(a, b, pfEnd int64) float64 {
	var sum float64
	for m := 1; m < len(s.pts); m++ {
		p0, p1 := s.pts[m-1], s.pts[m]
		d := p1.out - p0.out
		if d == 0 || p1.t <= a {
			continue
		}
		if p0.t >= b {
			break
		}
		lo := p0.t
		if p0.out == 0 && pfEnd >= 0 {
			lo = min(max(pfEnd, p0.t), p1.t)
		}
		sum += float64(d) * overlap(lo, p1.t, a, b)
	}
	return sum
}

// overlap returns the fraction of (lo, hi] inside (a, b]; a zero-length
// (lo, hi] counts whole when hi is inside.
func overlap(lo, hi, a, b int64) float64 {
	if hi <= lo {
		if hi > a && hi <= b {
			return 1
		}
		return 0
	}
	x0, x1 := max(lo, a), min(hi, b)
	if x1 <= x0 {
		return 0
	}
	return float64(x1-x0) / float64(hi-lo)
}
