package ledger

import (
	"math"
	"sync/atomic"

	"github.com/otelenergy/otelenergy/ring"
)

// Defaults of [Config].
const (
	DefaultHorizon   = 10e9    // ns: an interval waits at most 10 s for reports
	defaultMaxAge    = 3600e9  // ns: a request not ended within an hour stops accruing
	DefaultMaxActive = 1 << 16 // requests tracked at once
	inboxShards      = 16      // StartRequest spreads over this many lock-free stacks
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
	// accruing. Zero selects an hour.
	MaxAge int64
	// MaxActive bounds the requests tracked at once. Zero selects
	// DefaultMaxActive.
	MaxActive int
	// IdleWatts, when IdleFixed, is the static power of all devices
	// together, split evenly among them; otherwise it is measured on the
	// intervals in which nothing ran.
	IdleWatts float64
	IdleFixed bool
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
// Add, End, Estimate and the Account methods are safe from any goroutine
// and lock-free. Observe, Settle, Flush, SetShare and SetLost form the
// sampler side: they must be called from one goroutine at a time.
//
// It only composes the stages of the package documentation, each of which
// owns its state: intake, the requests' timelines (reqs), each device's
// intervals, the model, the split (which keeps none), settlement and the
// estimates it publishes.
type Ledger struct {
	cfg   Config
	in    intake       // the intake stage, where Add leaves requests
	reqs  roster       // the requests being tracked and their reports
	devs  []device     // each device's intervals and share
	times []timeDev    // the time rings
	model model        // every learned value
	books settlement   // what settlement keeps of the requests it let go
	est   published    // what the estimates read
	pub   totals       // the ledger's totals
	buf   scratch      // the stages' working memory, reused
	coef  coefficients // the model's coefficients, for Coefficients
}

// roster is the requests the sampler tracks: the active ones in the order
// it adopted them, the tokens reported outside any request as a timeline
// of their own, and the reads.
type roster struct {
	active []*Account
	// running is the active requests whose end the sampler has not seen,
	// in no order: a read observes only them. endedOut and endedIn sum
	// the others' token counts as they were when their ends were seen,
	// or at the last settle.
	running           []*Account
	endedOut, endedIn uint64
	unowned           Account
	prevRead          int64
	firstRead         int64
	read              bool
	// batchNS is the request-ns of activity so far: the active requests
	// at each read times the time since the previous.
	batchNS float64
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
	// prices are the newest interval's weighing's, for the estimates.
	prices prices
}

// totals are the ledger's published counters, safe from any goroutine.
type totals struct {
	unattributed, splitMJ, other atomic.Uint64
	dropped, expired             atomic.Uint64
	activeN                      atomic.Int64
	// tokOut and tokIn are the tokens of the requests let go
	// (books.retiredOut and retiredIn) plus the active requests' counts
	// at the last Observe.
	tokOut, tokIn atomic.Uint64
}

// scratch is the stages' working memory, reused from interval to
// interval so that steady state allocates nothing.
type scratch struct {
	feat     featureBuf
	kept     keptFeatures
	shares   []uint64
	hookReqs []*Account
	hookCov  []uint64
	prov     []provShare // the provisional split's shares, by active request
}

// New returns a ledger over cfg.Rings.
func New(cfg Config) *Ledger {
	if cfg.Horizon <= 0 {
		cfg.Horizon = DefaultHorizon
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = defaultMaxAge
	}
	if cfg.MaxActive <= 0 {
		cfg.MaxActive = DefaultMaxActive
	}
	if cfg.TimeHorizon <= 0 {
		cfg.TimeHorizon = cfg.Horizon
	}
	l := &Ledger{cfg: cfg, devs: make([]device, len(cfg.Rings)), model: newModel(len(cfg.Rings), cfg.IdleWatts, cfg.IdleFixed)}
	for i, r := range cfg.Rings {
		d := &l.devs[i]
		d.idx, d.ivs.ring, d.frac, d.split = i, r, 1, true
	}
	l.times = newTimes(cfg.TimeRings)
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

// setActive publishes n, the number of active requests, and spreads the
// room left under MaxActive over the inbox's stacks. It is called after
// every drain, which frees room too, and starts a new generation of room.
func (l *Ledger) setActive(n int) {
	l.pub.activeN.Store(int64(n))
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
	q := &l.reqs
	prev := q.prevRead
	if !q.read || t < prev {
		prev = t
	}
	if !q.read {
		// Tokens reported outside any request are spread from the first
		// read on, like a request's since its previous report.
		q.unowned.st = sampled{pts: []point{{t: t}}, pfEnd: t}
		q.firstRead = t
	}
	q.batchNS += float64(len(q.active)) * float64(t-prev)
	q.read, q.prevRead = true, t
	// A report first seen at this read happened in (prev, t].
	rep := prev + (t-prev)/2
	before := len(q.active)
	l.in.drain(l.adopt)
	l.est.noteAdopted(q.active[before:])
	var out, in uint64
	kept := 0
	for j, r := range q.running {
		// The end is loaded before the counts: End follows the request's
		// last report, so once it is seen the counts are final. Active
		// requests are never retired: their counts are plain.
		e := r.end.Load()
		o, i := r.out.Load(), r.in.Load()
		l.observe(r, t, rep, e, o, i)
		if r.st.endSeen {
			q.endedOut += o
			q.endedIn += i
			continue
		}
		out += o
		in += i
		if kept != j {
			q.running[kept] = r // written only behind an end: a pass with none writes nothing
		}
		kept++
	}
	clear(q.running[kept:])
	q.running = q.running[:kept]
	// No active request retires during the pass (only the sampler side
	// retires them; Add retires only requests it refuses, never active),
	// so none is counted twice or missed between the sums.
	l.pub.tokOut.Store(l.books.retiredOut.Load() + q.endedOut + out)
	l.pub.tokIn.Store(l.books.retiredIn.Load() + q.endedIn + in)
	if u := &q.unowned; len(u.st.pts) > 0 {
		if last := u.st.last(); last.out != uOut || last.in != uIn {
			u.st.pts = append(u.st.pts, point{t: max(rep, last.t), out: uOut, in: uIn})
		}
	}
	l.setActive(len(q.active))
}

func (l *Ledger) adopt(r *Account) {
	if len(l.reqs.active) >= l.cfg.MaxActive {
		l.drop(r)
		return
	}
	r.st = sampled{known: r.start, pfEnd: -1, batch0: l.reqs.batchNS}
	r.st.pts = append(r.st.inline[:0], point{t: r.start})
	l.reqs.active = append(l.reqs.active, r)
	l.reqs.running = append(l.reqs.running, r)
}

// drop refuses r: it gets nothing, is final at once and is counted.
func (l *Ledger) drop(r *Account) {
	l.pub.dropped.Add(1)
	l.books.retire(r)
	r.setFlag(FlagDropped)
	r.final.Store(true)
}

// SplitMJ returns the energy, in mJ, of every interval split so far, summed
// over devices: what the requests, Unattributed and OtherProcesses add up
// to exactly.
func (l *Ledger) SplitMJ() uint64 { return l.pub.splitMJ.Load() }

// Unattributed returns the energy, in mJ, that went to no request.
func (l *Ledger) Unattributed() uint64 { return l.pub.unattributed.Load() }

// OtherProcesses returns the energy, in mJ, that belonged to other
// processes on shared devices.
func (l *Ledger) OtherProcesses() uint64 { return l.pub.other.Load() }

// Tokens returns the output and input tokens of every request the ledger
// was handed: the counts of those it has let go (finalized, flushed or
// dropped), as they were then, plus the active requests' counts at the
// last Observe. Requests still waiting for the sampler count from the
// Observe that adopts them, and reports refused by AddOutput or AddInput
// (false) never count here. So each report counts at most once, and each
// figure never decreases. Safe from any goroutine.
func (l *Ledger) Tokens() (out, in uint64) { return l.pub.tokOut.Load(), l.pub.tokIn.Load() }

// Dropped returns how many requests got nothing because the ledger was
// full.
func (l *Ledger) Dropped() uint64 { return l.pub.dropped.Load() }

// Expired returns how many requests stopped accruing at the maximum age.
func (l *Ledger) Expired() uint64 { return l.pub.expired.Load() }

// Active returns the number of requests being tracked.
func (l *Ledger) Active() int { return int(l.pub.activeN.Load()) }

// Coefficients is the ledger's learned power model, summed over devices.
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
	// InputJ is the energy of one uncached input token, in J.
	InputJ float64
	// DecodeBusyW is the power a device draws while any request is
	// decoding, however many, in W.
	DecodeBusyW float64
	// DecodeW is the power each decoding request adds, in W.
	DecodeW float64
}

// coefficients publishes the model's coefficients, float64 bits summed
// over devices, for Coefficients.
type coefficients [nFeat]atomic.Uint64

// Coefficients returns the learned model. It is safe from any goroutine.
func (l *Ledger) Coefficients() Coefficients {
	f := func(i int) float64 { return math.Float64frombits(l.coef[i].Load()) }
	return Coefficients{f(fStatic), f(fOutput), f(fPrefill), f(fPrefillBusy), f(fInput), f(fDecodeBusy), f(fDecode)}
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
