package ledger

import (
	"math"
	"sync/atomic"

	"github.com/otelenergy/otelenergy/ring"
)

// Defaults of [Config].
const (
	DefaultHorizon   = 10e9    // ns: an interval waits at most 10 s for reports
	DefaultMaxAge    = 3600e9  // ns: a request not ended within an hour stops accruing
	DefaultMaxActive = 1 << 16 // requests tracked at once
	DefaultForget    = 120e9   // ns: the model's memory
	fallbackInput    = 0.1     // input-token weight before the model is learned
	inboxShards      = 16      // StartRequest spreads over this many lock-free stacks
	maxWarmActive    = 1024    // requests beyond which splits no longer wait for a young model
	nsPerSecond      = float64(1e9)
)

// Config configures a [Ledger].
type Config struct {
	// Rings holds one ring per device, whose points are the device's
	// counter steps: T the step's estimated instant, EnergyMJ the device's
	// cumulative energy. The ledger only reads them.
	Rings []*ring.Ring
	// Horizon, in ns, is how long an interval waits for every request
	// active in it to report past it. Zero selects DefaultHorizon.
	Horizon int64
	// MaxAge, in ns, is how long a request may run before it stops
	// accruing. Zero selects DefaultMaxAge.
	MaxAge int64
	// MaxActive bounds the requests tracked at once. Zero selects
	// DefaultMaxActive.
	MaxActive int
	// IdleWatts, when IdleFixed, is the static power of all devices
	// together, split evenly among them; otherwise it is learned.
	IdleWatts float64
	IdleFixed bool
	// OutputWeight and InputWeight, when WeightsFixed, weigh tokens in the
	// dynamic split instead of the learned model.
	OutputWeight, InputWeight float64
	WeightsFixed              bool
	// OnSplit, when set, is called once for every interval as it is
	// finally split (never for the provisional split behind the
	// estimates), on the sampler's goroutine, after the interval's shares
	// are given: dev is the device's index in Rings and (a, b] the
	// interval on the ledger's clock. reqs[i] got sharesMJ[i] of its
	// energy (static and dynamic parts summed) and was active for
	// coverNS[i] of its time, shared equally at every instant among the
	// requests active then (the rest of b − a was idle); restMJ is the
	// energy no request got (unattributed and other processes'), so that
	// Σ sharesMJ + restMJ is the interval's energy. Every interval of
	// SplitMJ is handed over once. The slices are the ledger's scratch,
	// valid only during the call and not to be modified. A package that
	// converts energy (such as carbon) hooks in here, so that the ledger
	// stays free of it.
	OnSplit func(dev int, a, b int64, reqs []*Account, sharesMJ []uint64, restMJ uint64, coverNS []uint64)
	// TimeRings holds rings split among the requests by time alone, as
	// the static part of an interval is: at every instant equally among
	// the requests active then, and time with none to no request. Their
	// energy is wholly the requests' (scale it to the attributed
	// processes' share before pushing it), nothing of it is learned, and
	// an interval is split as soon as its end is pushed. A request is
	// final only once these too are split past its end. Each share goes
	// to TimeGive, not to [Account.EnergyMJ].
	TimeRings []*ring.Ring
	// TimeGive receives, on the sampler side, each share of
	// TimeRings[i]'s energy given to a request, in mJ.
	TimeGive func(r *Account, i int, mj uint64)
	// TimeHorizon, in ns, is how long a time ring may go without a point
	// before it stops holding requests back (see [FlagTimeForced]). Zero
	// selects Horizon; set it above the rings' period.
	TimeHorizon int64
}

// Ledger splits metered energy among requests. See the package
// documentation for the arithmetic and the guarantees.
//
// Add, Estimate and the Account methods are safe from any goroutine and
// lock-free. Observe, Settle, Flush, SetShare and SetLost form the sampler
// side: they must be called from one goroutine at a time.
//
// It composes the stages of the package documentation: in (intake), each
// device's ivs (intervals), fit (model), divide (split, which keeps no
// state) and books (settlement).
type Ledger struct {
	cfg Config

	// in is the intake stage, where Add leaves requests for the sampler.
	in intake

	// Sampler-owned.
	active    []*Account
	devs      []device
	times     []timeDev
	unowned   Account
	prevRead  int64
	firstRead int64
	read      bool
	fit       fit          // the model stage
	tauPub    atomic.Int32 // fit.tau, for Coefficients
	step      float64      // the batch's recent decode step, ns per token; 0 unknown
	jOut      float64      // recent modelled energy per output token, decode power included, J
	rate      float64      // recent requests' output rate, tokens per ns
	rhoAvg    float64      // recent prefills' input tokens per ns
	parts     []part
	running   int      // parts of requests not ended, in the last features
	sweep     []uint64 // coverage's and union's scratch: edge keys
	provLast  int64    // when the last provisional pass ran
	// pfSpans and decSpans are learnFeatures' scratch.
	pfSpans, decSpans []span
	// provAcc holds, per active request by its index, what the
	// provisional pass gave it: mJ, the output tokens (seen or
	// extrapolated) with their modelled energy in J, and its prefill part
	// (pf mJ, its share of the prefill pool pfS summed over intervals, and
	// the prefill time pfT in ns) for End to reprice once the prompt is
	// known.
	provAcc []struct{ mj, tok, tokJ, pf, pfS, pfT float64 }
	// shareMJ holds the shares of the interval being split; hookReqs and
	// hookCov are OnSplit's scratch.
	shareMJ  []uint64
	hookReqs []*Account
	hookCov  []uint64

	// Published.
	unattributed atomic.Uint64
	splitMJ      atomic.Uint64
	other        atomic.Uint64
	dropped      atomic.Uint64
	expired      atomic.Uint64
	activeN      atomic.Int64
	coef         [nFeat]atomic.Uint64 // float64 bits, summed over devices, J units
	avgW         atomic.Uint64        // float64 bits: recent attributable power, summed over devices
	jOutBits     atomic.Uint64        // float64 bits of jOut
	provThru     atomic.Int64         // the provisional split covers every request up to here
	// pfCoef publishes the prefill time's coefficients (ttft.coefs) for
	// Estimate, once pfCoefOK says they are learned.
	pfCoef   [3]atomic.Uint64
	pfCoefOK atomic.Bool

	// tokOut and tokIn publish the tokens of the requests let go
	// (books.retiredOut and retiredIn) plus the active requests' counts
	// at the last Observe.
	tokOut, tokIn atomic.Uint64

	// The running requests, for Estimate (see Ledger.runningNow). provN
	// packs the number of requests active at provThru (low 32 bits) with
	// how many of them had ended by the last settle (high 32 bits), and
	// provOff sums those ends' times after provThru, ns. live packs the
	// number of active requests not ended at the last settle (low 32
	// bits) with the inbox's ended counts summed just before it counted
	// them (high 32 bits, modulo 2³²); liveEndT is the inbox's endT then,
	// and liveT the time of the settle that stored them.
	provN    atomic.Uint64
	provOff  atomic.Int64
	live     atomic.Uint64
	liveEndT atomic.Uint64
	liveT    atomic.Int64
	// adopted counts the requests adopted since the last settle that were
	// running at its time (see Observe).
	adopted atomic.Int64

	books settlement // the settlement stage

	// The sampler's, after the fields every pass reads.
	//
	// actS integrates unended, the requests adopted and not seen to end
	// at the last read, over time, in request-seconds, at each read: a
	// request's mean concurrency, which sets the batch's decode step under
	// continuous batching, is its growth over the request's life (see
	// batchAt). Ended requests wait in active for their splits, up to
	// the horizon, and are not in the batch.
	actS    float64
	unended int
	// rateSum and rateW are rate's moving average and the weight it has
	// gathered (1 − 0.95ⁿ after n updates): rate is their ratio, so that
	// the first requests' rates are not averaged with a zero that no
	// request reported.
	rateSum, rateW float64
}

// device is the ledger's state for one of Config.Rings: its walk
// through the ring, and the attributed processes' share of it.
type device struct {
	idx int       // its index in Config.Rings
	ivs intervals // the intervals stage's walk over its ring
	// The attributed processes' share of the device (SetShare).
	frac   float64
	split  bool // frac applies
	shared bool // shared and not splittable
	lost   bool
}

// part is one request's features in the interval being split.
type part struct {
	r        *Account
	idx      int   // r's index in the ledger's active requests
	lo, hi   int64 // active span in the interval
	pfLo     int64 // prefill span in the interval
	pfHi     int64
	dLo      int64 // decode span in the interval: [dLo, hi]; hi when none
	cov      float64
	pfShare  float64 // rate-weighted share of the time with any prefill, ns
	decShare float64 // share of the time with any decode, ns
	rho      float64 // prefill weight: input tokens per second of prefill
	out, in  float64
	tail     float64 // decode weight, in tokens, after the last token (see features)
	weight   float64
	tokJ     float64 // modelled token energy, input tokens' included, J
	pfJ      float64 // modelled prefill energy, J
	inJ      float64 // modelled input tokens' energy, J (part of tokJ)
}

// New returns a ledger over cfg.Rings.
func New(cfg Config) *Ledger {
	if cfg.Horizon <= 0 {
		cfg.Horizon = DefaultHorizon
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.MaxActive <= 0 {
		cfg.MaxActive = DefaultMaxActive
	}
	if cfg.TimeHorizon <= 0 {
		cfg.TimeHorizon = cfg.Horizon
	}
	l := &Ledger{cfg: cfg, devs: make([]device, len(cfg.Rings)), fit: newFit(len(cfg.Rings), cfg)}
	for i, r := range cfg.Rings {
		d := &l.devs[i]
		d.idx, d.ivs.ring, d.frac, d.split = i, r, 1, true
	}
	l.newTimes()
	l.setActive(0)
	return l
}

// Add hands r to the ledger. It is lock-free: r is pushed on one of a few
// stacks that the sampler drains at its next Observe. The requests waiting
// there and the active ones together are bounded by MaxActive, so a
// sampler that hangs holds at most that many: a request beyond it is
// refused at once, gets nothing and is counted ([Ledger.Dropped]), as one
// the sampler finds no room for.
//
// Each stack has its own part of that room, which the sampler publishes
// whenever the active requests change, so a request touches only its own
// stack's cache line while that stack has room. A full stack sends it on
// to the next ones, so no request is refused while any stack has room.
func (l *Ledger) Add(r *Account) {
	first := shardOf(r)
	if l.in.inbox[first].push(r) || l.in.spill(r, first) {
		return
	}
	l.drop(r)
}

// End ends r at t, as [Account.End] does, and counts the end for the
// estimates of the requests still running: as requests end, the static
// power is shared among fewer, and [Ledger.Estimate] prices each one's
// unsplit time with the share it gets among those still running. Use it
// instead of Account.End for a request handed to [Ledger.Add]. It is
// lock-free: a compare-and-swap on r, and one atomic add on the stack
// of the inbox that r was pushed on.
func (l *Ledger) End(r *Account, t int64) {
	if !r.end.CompareAndSwap(notEnded, max(t, r.start)) || r.final.Load() {
		// Ended before, or dropped, expired or flushed: the sampler no
		// longer counts it as running.
		return
	}
	l.in.ended(r)
}

// publishLive publishes, for runningNow, the requests not ended among the
// active ones at t and the inbox's ended counts summed before they were
// looked at. liveT is only the origin of the end times' offsets, so it
// moves only with what it refers to.
func (l *Ledger) publishLive(t, live, endedSum int64, endT uint64) {
	if v := uint64(uint32(min(live, math.MaxUint32))) | uint64(uint32(endedSum))<<32; v != l.live.Load() || endT != l.liveEndT.Load() {
		l.live.Store(v)
		l.liveEndT.Store(endT)
		l.liveT.Store(t)
	}
}

// runningNow returns how many tracked requests are running now, as the
// request path can tell without a lock: those not ended at the last
// settle, plus those waiting in the inbox, less the ends counted since;
// and the ends since then, with the sum of their times after the settle
// (ns). A request that ended or started during that settle may be counted
// once too often or too seldom.
func (l *Ledger) runningNow() (n, ends, endOff int64) {
	v := l.live.Load()
	queued, ended, endT := l.in.waiting()
	k := uint32(ended) - uint32(v>>32)
	// The times are summed modulo 2⁶⁴; their offsets from the settle's
	// time are small, so their sum comes out exact.
	endOff = int64(endT - l.liveEndT.Load() - uint64(k)*uint64(l.liveT.Load()))
	return int64(uint32(v)) + queued + l.adopted.Load() - int64(k), int64(k), endOff
}

// setActive publishes n, the number of active requests, and spreads the
// room left under MaxActive over the inbox's stacks. It is called after
// every drain, which frees room too, and starts a new generation of room.
func (l *Ledger) setActive(n int) {
	l.activeN.Store(int64(n))
	l.in.setRoom(max(l.cfg.MaxActive-n, 0))
}

// SetShare sets the fraction of device i's energy that belongs to the
// attributed processes (split true), or marks the device shared without a
// measured split (split false).
func (l *Ledger) SetShare(i int, fraction float64, split, shared bool) {
	d := &l.devs[i]
	d.frac, d.split, d.shared = min(max(fraction, 0), 1), split, shared
	if !split {
		d.frac = 1
	}
}

// SetLost marks device i lost: requests no longer wait for its steps.
func (l *Ledger) SetLost(i int) { l.devs[i].lost = true }

// Observe records what every tracked request has reported as of the read
// at t, adopting requests added since the previous read. uOut and uIn are
// the cumulative tokens reported outside any request. It is O(active
// requests) and allocates nothing in steady state.
func (l *Ledger) Observe(t int64, uOut, uIn uint64) {
	prev := l.prevRead
	if !l.read || t < prev {
		prev = t
	}
	if !l.read {
		// Tokens reported outside any request are spread from the first
		// read on, like a request's since its previous report.
		l.unowned.st = sampled{pts: []point{{t: t}}, pfEnd: t}
		l.firstRead = t
	}
	l.read, l.prevRead = true, t
	// A report first seen at this read happened in (prev, t].
	rep := prev + (t-prev)/2
	l.actS += float64(l.unended) * float64(t-prev) / nsPerSecond
	before := len(l.active)
	l.in.drain(l.adopt)
	// The requests adopted here leave the inbox's count; until the next
	// settle counts them among the running, runningNow counts them here:
	// those not ended by that settle's time (an end after it is among
	// the ends it subtracts).
	var adopted int64
	liveT := l.liveT.Load()
	for _, r := range l.active[before:] {
		if e := r.end.Load(); e == notEnded || e > liveT {
			adopted++
		}
		// As if the requests running at the last read had been since
		// its start.
		r.st.actS0 = l.actS - float64(l.unended+1)*float64(max(0, t-r.start))/nsPerSecond
	}
	if adopted > 0 {
		l.adopted.Add(adopted)
	}
	var out, in uint64
	live := 0
	for _, r := range l.active {
		l.observe(r, t, rep)
		if !r.st.endSeen {
			live++
		}
		// Active requests are never retired: their counts are plain.
		out += r.out.Load()
		in += r.in.Load()
	}
	// No active request retires during the pass (only the sampler side
	// retires them; Add retires only requests it refuses, never active),
	// so none is counted twice or missed between the two sums.
	l.unended = live
	l.tokOut.Store(l.books.retiredOut.Load() + out)
	l.tokIn.Store(l.books.retiredIn.Load() + in)
	if u := &l.unowned; len(u.st.pts) > 0 {
		if last := u.st.pts[len(u.st.pts)-1]; last.out != uOut || last.in != uIn {
			u.st.pts = append(u.st.pts, point{t: max(rep, last.t), out: uOut, in: uIn})
		}
	}
	l.setActive(len(l.active))
}

// batchAt returns the mean number of requests running over r's life up
// to the latest read (at least 1): actS is integrated up to that read, so
// the span is the same whatever time r's report is placed at.
func (l *Ledger) batchAt(r *Account) float64 {
	if d := float64(l.prevRead-r.start) / nsPerSecond; d > 0 {
		return max(1, (l.actS-r.st.actS0)/d)
	}
	return max(1, float64(l.unended))
}

func (l *Ledger) adopt(r *Account) {
	if len(l.active) >= l.cfg.MaxActive {
		l.drop(r)
		return
	}
	r.st = sampled{known: r.start, pfEnd: -1}
	r.st.pts = append(r.st.inline[:0], point{t: r.start})
	l.active = append(l.active, r)
}

// drop refuses r: it gets nothing, is final at once and is counted.
func (l *Ledger) drop(r *Account) {
	l.dropped.Add(1)
	l.books.retire(r)
	r.setFlag(FlagDropped)
	r.final.Store(true)
}

// addPoint appends p to r's timeline, growing it into a recycled slice
// when the inline storage is full.
func (l *Ledger) addPoint(r *Account, p point) {
	s := &r.st
	if len(s.pts) == cap(s.pts) {
		if grown, ok := l.books.reuse(len(s.pts)); ok {
			s.pts = append(grown, s.pts...)
		}
	}
	s.pts = append(s.pts, p)
}

func (l *Ledger) observe(r *Account, t, rep int64) {
	s := &r.st
	if s.endSeen {
		return
	}
	// The end is loaded before the counts: End follows the request's last
	// report, so once it is seen the counts are final.
	end, ended := r.Ended()
	o, in := r.out.Load(), r.in.Load()
	at := max(rep, r.start)
	if ended {
		s.endSeen, s.end = true, end
		at = min(at, s.end)
		if in > 0 && o > 0 {
			// Its length teaches the prefill time of requests that show
			// no first token (see ttft).
			l.fit.ttft.addWhole(float64(in), float64(o), float64(end-r.start)/nsPerSecond, l.batchAt(r))
		}
	} else if t-r.start > l.cfg.MaxAge {
		s.endSeen, s.end = true, r.start+l.cfg.MaxAge
		r.setFlag(FlagExpired)
		l.expired.Add(1)
		at = min(at, s.end)
	}
	last := s.pts[len(s.pts)-1]
	if o != last.out || in != last.in {
		at = max(at, last.t)
		known := at
		switch {
		case last.out == 0 && o > 0:
			if !l.placePrefill(r, at, o, in) && !s.endSeen {
				// The first chunk hides when decode began; the next
				// report's rate tells. Until then the intervals since
				// the previous report wait.
				known = s.known
			}
		case s.firstN > 0 && o > s.firstN:
			if !l.placeFromRate(r, at, o, in) && !s.endSeen {
				known = s.known
			}
		}
		l.addPoint(r, point{t: at, out: o, in: in})
		s.known = max(s.known, known)
		if !s.endSeen || o >= 2*stepTokens {
			if rate := s.ownRate(); rate > 0 {
				l.rateSum += 0.05 * (rate - l.rateSum)
				l.rateW += 0.05 * (1 - l.rateW)
				l.rate = l.rateSum / l.rateW
			}
		}
		if !s.endSeen {
			l.extrapolate(r)
		}
	}
	if s.endSeen && s.pfEnd < 0 {
		s.pfEnd, s.step = s.end, 0 // no output: the whole request was prefill
	}
	if s.endSeen && s.firstN > 0 {
		// It ended before reporting enough to time its step: its reports
		// since the first time it as well as they can.
		last := s.pts[len(s.pts)-1]
		if last.out > s.firstN {
			l.placeFromRate(r, last.t, last.out, last.in)
		}
		s.firstN = 0
	}
	if s.endSeen {
		l.books.reconcile(r)
	}
}

// placePrefill sets the end of r's prefill when its first output tokens,
// n of them, are first seen at time at, and reports whether the placement
// is final. The prefill ends one decode step before the first token, and
// the n tokens took a step each, so it ended about n steps before at. The
// request's next reports give its step; until then the batch's recent
// step places it for now. A request that reports once, at its end, is
// placed by the prefill time learned for its prompt.
func (l *Ledger) placePrefill(r *Account, at int64, n, in uint64) bool {
	s := &r.st
	step := l.step
	if step <= 0 {
		step = float64(at-r.start) / float64(n+1)
	}
	// The decode of n tokens took n steps of (start, at]; at most all
	// of it.
	latest := max(r.start, at-int64(min(step*float64(n), float64(at-r.start))))
	if s.endSeen {
		// The n tokens' own rate is unknown: keep at least one token's
		// even share of (start, at] for decode.
		latest := at - (at-r.start)/int64(n+1)
		step, byStep := l.fit.ttft.stepSeconds(l.batchAt(r))
		sec, byPrompt := l.fit.ttft.predict(float64(in))
		if byStep && (!byPrompt || float64(n)*step < sec) {
			// Under continuous batching (the whole-request fit holds) its
			// n tokens took n of the batch's steps before its end: that
			// places its own prefill, however long it was, where the
			// prefill time learned for its prompt places a typical one.
			// The step moves with the batch, so this is the better guess
			// only while its decode was shorter than its prefill: each
			// is off by about the same fraction of itself.
			s.pfEnd = min(max(r.start, at-int64(float64(n)*step*nsPerSecond)), latest)
		} else if byPrompt {
			s.pfEnd = min(r.start+int64(sec*nsPerSecond), latest)
		} else {
			l.guessPrefill(r, r.start+(at-r.start)/int64(n+1), latest, in)
		}
		s.pfEnd = max(s.pfEnd, r.start)
		s.step = min(int64(l.step), at-s.pfEnd)
		return true
	}
	pfEnd := latest
	s.step = int64(step)
	sec, byPrompt := l.fit.ttft.predict(float64(in))
	if byPrompt && n > 2 {
		// A chunk's length at the batch's step is off by the request's
		// own rate times the chunk; the learned prefill time is not.
		pfEnd = min(r.start+int64(sec*nsPerSecond), at-(at-r.start)/int64(n+1))
	}
	s.pfEnd = max(r.start, pfEnd)
	if l.step <= 0 && !byPrompt {
		// Neither the batch's step nor a prefill time: a guess, until
		// its next report times its tokens.
		l.guessPrefill(r, s.pfEnd, at-(at-r.start)/int64(n+1), in)
	}
	s.firstN, s.firstT = n, at
	return false
}

// stepTokens is how many tokens past the first report time a request's
// decode step; fewer, over a read interval that is about as long as a
// step, would time it to within a factor of two.
const stepTokens = 3

// placeFromRate places the prefill of a request from the rate of its
// reports after the first: the first report's n tokens took as long at
// that rate, and the prefill ended one step before the first of them.
// A later report that is the request's last, and smaller than the first,
// times its tokens poorly (the request may idle before it ends); the
// learned prefill time then places the prefill if it can.
func (l *Ledger) placeFromRate(r *Account, at int64, o, in uint64) bool {
	s := &r.st
	dt := at - s.firstT
	if dt <= 0 {
		return false
	}
	if o-s.firstN < stepTokens && !s.endSeen {
		return false
	}
	defer func() { s.firstN = 0 }()
	perToken := float64(dt) / float64(o-s.firstN)
	byRate := s.firstT - int64(perToken*float64(s.firstN))
	poor := s.endSeen && o-s.firstN < s.firstN
	if poor {
		if sec, ok := l.fit.ttft.predict(float64(in)); ok {
			// Keep at least one token's time per token of the first
			// chunk at the later report's rate, at most.
			byRate = max(r.start+int64(sec*nsPerSecond), byRate)
		}
	}
	s.pfEnd = max(r.start, min(s.firstT, byRate))
	s.pfGuess = false
	s.step = int64(perToken)
	if !poor {
		l.fit.ttft.add(float64(in), float64(s.pfEnd-r.start)/nsPerSecond)
		if l.step <= 0 {
			l.step = perToken
		} else {
			l.step += 0.1 * (perToken - l.step)
		}
	}
	return true
}

// prefillCoefs returns the prefill time's coefficients as the sampler
// last published them, and false before they are learned.
func (l *Ledger) prefillCoefs() ([3]float64, bool) {
	if !l.pfCoefOK.Load() {
		return [3]float64{}, false
	}
	var th [3]float64
	for i := range th {
		th[i] = math.Float64frombits(l.pfCoef[i].Load())
	}
	return th, true
}

// SplitMJ returns the energy, in mJ, of every interval split so far, summed
// over devices: what the requests, Unattributed and OtherProcesses add up
// to exactly.
func (l *Ledger) SplitMJ() uint64 { return l.splitMJ.Load() }

// Unattributed returns the energy, in mJ, that went to no request.
func (l *Ledger) Unattributed() uint64 { return l.unattributed.Load() }

// OtherProcesses returns the energy, in mJ, that belonged to other
// processes on shared devices.
func (l *Ledger) OtherProcesses() uint64 { return l.other.Load() }

// Tokens returns the output and input tokens of every request the ledger
// was handed: the counts of those it has let go (finalized, flushed or
// dropped), as they were then, plus the active requests' counts at the
// last Observe. Requests still waiting for the sampler count from the
// Observe that adopts them, and reports refused by AddOutput or AddInput
// (false) never count here. So each report counts at most once, and each
// figure never decreases. Safe from any goroutine.
func (l *Ledger) Tokens() (out, in uint64) { return l.tokOut.Load(), l.tokIn.Load() }

// Dropped returns how many requests got nothing because the ledger was
// full.
func (l *Ledger) Dropped() uint64 { return l.dropped.Load() }

// Expired returns how many requests stopped accruing at the maximum age.
func (l *Ledger) Expired() uint64 { return l.expired.Load() }

// Active returns the number of requests being tracked.
func (l *Ledger) Active() int { return int(l.activeN.Load()) }

// Coefficients is the ledger's learned energy model, summed over devices.
// All are zero until enough intervals have been seen.
type Coefficients struct {
	// StaticW is the static power, in W.
	StaticW float64
	// OutputJ is the energy of one output token, in J.
	OutputJ float64
	// PrefillW is the power each request in prefill adds, in W.
	PrefillW float64
	// PrefillBusyW is the power a device draws while any request is in
	// prefill, however many, in W.
	PrefillBusyW float64
	// InputJ is the energy of one input token, in J.
	InputJ float64
	// DecodeBusyW is the power a device draws while any request is
	// decoding, however many, in W.
	DecodeBusyW float64
	// DecodeW is the power each decoding request adds, in W.
	DecodeW float64
	// GuessPrefillS is the prefill time per thousand input tokens, in s,
	// that places the prefills no timing placed; 0 is one token's even
	// share of the request's time.
	GuessPrefillS float64
}

// Coefficients returns the learned model. It is safe from any goroutine.
func (l *Ledger) Coefficients() Coefficients {
	f := func(i int) float64 { return math.Float64frombits(l.coef[i].Load()) }
	return Coefficients{f(fStatic), f(fOutput), f(fPrefill), f(fPrefillBusy), f(fInput), f(fDecodeBusy), f(fDecode),
		taus[l.tauPub.Load()] * 1000 / nsPerSecond}
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
