package otelenergy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/internal/steptime"
	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/ring"
	"github.com/otelenergy/otelenergy/runscope"
	"github.com/otelenergy/otelenergy/tracker"
)

// maxTokensPerCall is the largest count one AddTokens call accepts. Larger
// or negative counts are rejected and counted, never wrapped into a huge
// number.
const maxTokensPerCall = 1 << 24

// Run is a run: a model load or hot-swap, with its own id and baseline. It
// is runscope's type, here so that the common case needs one import.
type Run = runscope.Run

// Snapshot is a set of cumulative totals at one instant.
type Snapshot = runscope.Snapshot

// Monitor meters the energy of one [Source]'s devices and attributes it to
// tokens and requests.
//
// One background goroutine, started by [Monitor.Start], reads every device
// at the configured cadence, learns when each device's counter steps, and
// records the steps into a lock-free ring per device. The ledger splits the
// energy of each step among the requests active in it. Instruments are
// registered with the MeterProvider at construction and observe the
// sampled totals. Requests are tracked by [Monitor.StartRequest], which the
// HTTP middleware and gRPC interceptors call.
//
// All methods are safe for concurrent use, and safe on a nil Monitor, where
// they do nothing and return zero values or [ErrClosed]. A Monitor owns its
// Source and closes it on Shutdown.
type Monitor struct {
	cfg   config
	src   Source
	devs  []*device
	epoch time.Time

	// Token totals are derived, not counted on the request path: a
	// tracked request's report is one atomic add on its own counter, and
	// the sampler publishes outTokens and inTokens at each sample as the
	// ledger's [ledger.Ledger.Tokens] plus unowned (reported outside any
	// tracked request) plus late (reported to a request the ledger had
	// already let go). A report is in at most one of the three, and in
	// exactly one from the sample that adopts its request on; each of
	// them never decreases, so neither do the totals.
	outTokens   atomic.Uint64
	inTokens    atomic.Uint64
	unownedOut  atomic.Uint64
	unownedIn   atomic.Uint64
	lateOut     atomic.Uint64
	lateIn      atomic.Uint64
	flushed     atomic.Bool // the ledger was flushed: totals are computed on demand
	rejected    atomic.Uint64
	sampleNanos atomic.Int64 // duration of the last sampling pass
	shut        atomic.Bool

	// sampleMu makes Sample the rings' single writer and the ledger's
	// single sampler, whether it is called by the sampler goroutine,
	// BeginRun or the application.
	sampleMu   sync.Mutex
	lastSample atomic.Int64 // ns since epoch; -1 before the first sample
	lastSettle int64        // guarded by sampleMu

	scope runscope.Scope
	run   atomic.Pointer[runInfo]

	ledger  *ledger.Ledger
	pending pendingSpans
	bag     *baggageAttrs // with WithBaggageAttributes
	models  modelAttrs    // request models on otelenergy.request.energy
	co2     *co2State     // with WithCarbon
	inst    *instruments
	sharer  source.Sharer
	stamper source.Stamper // src, when its counters stamp their updates
	host    *hostMeter     // with WithHostSource

	life    sync.Mutex
	started bool
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

// device is the sampler's state for one device.
type device struct {
	Device
	acc     *tracker.Accumulator
	steps   steptime.Stamped // sampler-only
	ring    *ring.Ring
	prevRaw uint64 // sampler-only: the previous reading that was not jitter
	primed  bool   // sampler-only: the ring has its first point
	failed  bool   // sampler-only: the previous read failed
	bounded bool   // sampler-only: a wrong power bound was reported
	// confirmed holds the times of the device's latest confirmed
	// glitches, a ring of glitchReport; sampler-only.
	confirmed  [glitchReport]int64
	confirmedN int
	errors     atomic.Uint64
	lost       atomic.Bool
	period     atomic.Int64 // learned counter update period, ns; 0 unknown
	share      atomic.Pointer[source.Share]
	// pend is the step the current sampling pass found, pushed once the
	// pass has published the token totals; sampler-only.
	pend       bool
	pendT      int64
	pendEnergy uint64
}

// runInfo is a run plus everything the request path needs from it, built
// once per run.
type runInfo struct {
	run       *runscope.Run
	spanAttr  attribute.KeyValue
	recordOpt metric.RecordOption
	jptOpt    metric.ObserveOption
	genaiOpt  metric.RecordOption // with WithGenAIMetrics
}

// NewMonitor returns a Monitor over src, with instruments registered on the
// configured MeterProvider. It does not start sampling: call
// [Monitor.Start], or [Monitor.Sample] by hand. It fails with
// [ErrInvalidConfig] for bad options, and with [ErrNoDevices] when src has
// no device.
func NewMonitor(src Source, opts ...Option) (_ *Monitor, err error) {
	if src == nil {
		return nil, fmt.Errorf("%w: nil Source", ErrInvalidConfig)
	}
	tapped, _ := src.(source.Tapped)
	if tapped != nil {
		if src = tapped.Inner(); src == nil {
			return nil, fmt.Errorf("%w: nil Source", ErrInvalidConfig)
		}
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.carbon != nil {
		if err := claimCarbon(cfg.carbon); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				releaseCarbon(cfg.carbon)
			}
		}()
	}
	devices := src.Devices()
	if len(devices) == 0 {
		return nil, fmt.Errorf("%w: source %q has no devices", ErrNoDevices, src.Kind())
	}
	m := &Monitor{cfg: cfg, src: src, epoch: cfg.now(), bag: newBaggageAttrs(cfg), co2: newCo2State(cfg.carbon)}
	m.sharer, _ = src.(source.Sharer)
	m.stamper, _ = src.(source.Stamper)
	m.lastSample.Store(-1)
	rings := make([]*ring.Ring, len(devices))
	for i, d := range devices {
		r, err := ring.New(ringCapacity)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		rings[i] = r
		m.devs = append(m.devs, &device{
			Device: d,
			acc:    tracker.NewAccumulator(tracker.Limits{CounterMax: d.CounterMax, MaxWatts: d.PowerBound(), MaxWattsFirm: d.MaxWattsFirm && d.MaxWatts > 0}),
			ring:   r,
		})
	}
	lc := ledger.Config{Rings: rings, Horizon: int64(cfg.horizon)}
	if cfg.idleSet {
		lc.IdleWatts, lc.IdleFixed = cfg.idleWatts, true
	}
	if m.co2 != nil {
		lc.OnSplit = m.convertSplit
	}
	if cfg.host != nil {
		if m.host, err = newHostMeter(m, cfg.host); err != nil {
			return nil, err
		}
		lc.TimeRings, lc.TimeGive = m.host.rings(), m.host.give
		// A host read every quarter second (or every few, on a node
		// whose /proc is slow to walk) must not count as stalled under a
		// horizon shorter than a few of its windows.
		lc.TimeHorizon = max(lc.Horizon, 4*m.host.every, 2*int64(maxHostInterval))
	}
	m.ledger = ledger.New(lc)
	if m.inst, err = newInstruments(m); err != nil {
		return nil, err
	}
	if m.host != nil {
		if err := m.host.register(m); err != nil {
			return nil, err
		}
	}
	first, _ := m.scope.Begin(cfg.model, cfg.now(), m.snapshot(-1))
	m.setRun(first)
	if tapped != nil {
		tapped.Tap(tap{m})
	}
	return m, nil
}

// Resource returns a schemaless resource with otelenergy.source, the kind of
// the Monitor's source, to merge into the application's resource.
func (m *Monitor) Resource() *resource.Resource {
	if m == nil {
		return resource.Empty()
	}
	return resource.NewSchemaless(sourceKey.String(m.src.Kind()))
}

// Devices returns the metered devices.
func (m *Monitor) Devices() []Device {
	if m == nil {
		return nil
	}
	out := make([]Device, len(m.devs))
	for i, d := range m.devs {
		out[i] = d.Device
	}
	return out
}

// view returns a read-only view of device i's counter steps: each point is
// a step at its estimated instant, with the device's cumulative energy and
// the output token total of the sample that found the step (the total
// [Monitor.Totals] reports as of that sample). It fails with
// [ErrInvalidDevice] for an index outside [Monitor.Devices]. The node
// agent reads it through [source.Rings] (see tap).
func (m *Monitor) view(i int) (ring.View, error) {
	if m == nil || i < 0 || i >= len(m.devs) {
		return ring.View{}, fmt.Errorf("%w: index %d", ErrInvalidDevice, i)
	}
	return m.devs[i].ring.View(), nil
}

// now returns nanoseconds since the Monitor was built, on the monotonic
// clock when the configured clock provides one.
func (m *Monitor) now() int64 {
	if !m.cfg.clockSet {
		// The same monotonic difference as time.Now().Sub(m.epoch),
		// without the wall clock's read: this is on every request's path
		// (its start, its first output, its end).
		return int64(time.Since(m.epoch))
	}
	return int64(m.cfg.now().Sub(m.epoch))
}

// Start takes a first sample and starts the sampler goroutine. It is
// idempotent; after Shutdown, or on a nil Monitor, it returns [ErrClosed].
func (m *Monitor) Start() error {
	if m == nil {
		return ErrClosed
	}
	m.life.Lock()
	defer m.life.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.started {
		return nil
	}
	m.started = true
	m.stop, m.done = make(chan struct{}), make(chan struct{})
	m.Sample()
	go m.loop(m.stop, m.done)
	return nil
}

func (m *Monitor) loop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(m.cfg.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			m.Sample()
		}
	}
}

// Shutdown stops the sampler, waits for it to exit, takes a last sample,
// splits every interval metered so far and finalizes every tracked request
// with what it has (marked approximate where its last intervals were not
// split), unregisters the instruments and closes the source. It is
// idempotent and safe on a nil Monitor.
//
// If ctx ends before the sampler exits (a device read that hangs), Shutdown
// returns ctx's error at once without finalizing the tracked requests; the
// source is then closed when the sampler's read returns.
func (m *Monitor) Shutdown(ctx context.Context) error {
	if m == nil {
		return nil
	}
	m.life.Lock()
	if m.closed {
		m.life.Unlock()
		return nil
	}
	m.closed = true
	started, stop, done := m.started, m.stop, m.done
	m.life.Unlock()

	var errs []error
	exited := true
	if started {
		close(stop)
		select {
		case <-done:
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
			exited = false
		}
	}
	if exited && m.lastSample.Load() >= 0 {
		m.Sample()
	}
	// shut is set without sampleMu: a sample stuck in a device read must
	// not hold Shutdown past its context. Flush takes sampleMu only when
	// the sampler is known to have exited.
	m.shut.Store(true)
	if exited {
		m.sampleMu.Lock()
		m.ledger.Flush(m.finalize)
		m.flushed.Store(true)
		m.sampleMu.Unlock()
	}
	m.pending.flush()
	if err := m.inst.unregister(); err != nil {
		errs = append(errs, err)
	}
	if !exited {
		go func() {
			<-done
			releaseCarbon(m.cfg.carbon)
			if err := errors.Join(m.src.Close(), m.host.close()); err != nil {
				otel.Handle(err)
			}
		}()
		return errors.Join(errs...)
	}
	releaseCarbon(m.cfg.carbon)
	if err := errors.Join(m.src.Close(), m.host.close()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Sample reads every device once. The sampler goroutine calls it every
// interval; applications that drive sampling themselves (tests,
// simulations on a fake clock) call it instead of Start, at the same
// cadence, and get the same figures. Sample serializes with itself and
// does nothing after Shutdown.
//
// Each reading is stamped on the Monitor's clock ([WithClock]) when its
// read returns, and bracketed from when the previous read returned: a read
// that stalls widens its own window, so its energy is no glitch, and moves
// no other device's time. A source whose counters stamp their own updates
// (AMD SMI's, through package energysource) has each step placed at its
// stamp, mapped onto the Monitor's clock by the smallest gap between a
// read's return and the stamp it showed, and kept within the step's
// bracket of reads.
//
// A read that sees no counter step pushes nothing and splits nothing; its
// cost is the device reads plus one pass over the active requests' token
// counters. (Every quarter horizon a read settles the ledger even without a
// step, so that a stuck device holds no request back.) Steady-state sampling
// allocates nothing.
func (m *Monitor) Sample() {
	if m == nil {
		return
	}
	m.sampleMu.Lock()
	defer m.sampleMu.Unlock()
	if !m.shut.Load() {
		m.sampleLocked()
	}
}

func (m *Monitor) sampleLocked() {
	began := time.Now()
	t := m.now()
	if last := m.lastSample.Load(); last >= 0 && t < last {
		t = last // a clock that went backwards must not break the rings' order
	}
	if c := m.co2; c != nil {
		// An interval is converted at the reading last noted at or
		// before its end: the one in force when its counter step was
		// read, to within a pass, however long it waits to be split.
		c.model.Note(t)
	}
	stepped := false
	for i, d := range m.devs {
		if d.lost.Load() {
			continue
		}
		// Each reading is stamped when its read returns, and bracketed
		// from when the previous one did: a read that stalls, before or
		// after it reaches the counter, widens its own window and moves
		// no other device's time.
		var s bool
		s, t = m.read(i, d, t)
		stepped = stepped || s
	}
	if m.host != nil && m.host.sample(m, t) {
		stepped = true
	}
	// t is now the end of the pass: the tokens are read after every device.
	m.ledger.Observe(t, m.unownedOut.Load(), m.unownedIn.Load())
	m.publishTokens()
	// Settle on every step, and now and then without one, so that requests
	// become final even while a device is stuck, failing or lost.
	if stepped || t-m.lastSettle >= int64(m.cfg.horizon)/4 {
		m.ledger.Settle(t, m.finalize)
		m.pending.wake(t)
		m.lastSettle = t
	}
	m.lastSample.Store(t)
	m.sampleNanos.Store(int64(time.Since(began)))
}

// read samples device i, whose read begins at began, and reports whether
// its counter stepped and when the read returned (never before began).
// Errors are counted; the first of a run of failures is reported through
// otel.Handle, because the sampler has no caller.
func (m *Monitor) read(i int, d *device, began int64) (bool, int64) {
	var raw, stamp uint64
	var err error
	if m.stamper != nil {
		raw, stamp, err = m.stamper.ReadEnergyStamped(i)
	} else {
		raw, err = m.src.ReadEnergy(i)
	}
	t := max(m.now(), began)
	var step tracker.Step
	if err == nil {
		step, err = d.acc.AdvanceRead(raw, began, t)
	}
	if err != nil {
		d.errors.Add(1)
		if errors.Is(err, ErrDeviceLost) {
			d.lost.Store(true)
			m.ledger.SetLost(i)
		}
		if !d.failed {
			otel.Handle(fmt.Errorf("otelenergy: reading %s (%s): %w", d.ID, d.Name, err))
		}
		d.failed = true
		return false, t
	}
	d.failed = false
	if (step.Raised || step.Confirmed) && !d.bounded {
		m.checkBound(d, step, t)
	}
	if m.sharer != nil {
		s := m.sharer.Share(i)
		if p := d.share.Load(); p == nil || *p != s {
			d.share.Store(&s)
		}
		m.ledger.SetShare(i, s.Fraction, s.Split, s.Shared && !s.Split)
	}
	total := d.acc.Total()
	if !d.primed {
		// The first reading anchors the device's series: the ledger splits
		// from here on.
		d.steps.ObserveStamped(t, false, int64(stamp))
		d.primed, d.prevRaw = true, raw
		m.push(d, t, total)
		return true, t
	}
	// The counter stepped when its reading moved, other than by jitter:
	// a step whose energy went to paying back a glitch is still a step.
	moved := raw != d.prevRaw && step.Kind != tracker.Jitter
	if step.Kind != tracker.Jitter {
		d.prevRaw = raw
	}
	var at int64
	var ok bool
	if m.stamper != nil {
		at, ok = d.steps.ObserveStamped(t, moved, int64(stamp))
	} else {
		at, ok = d.steps.Observe(t, moved)
	}
	if !ok {
		return false, t
	}
	d.period.Store(d.steps.Period())
	m.push(d, at, total)
	return true, t
}

// glitchReport is how many confirmed glitches on one device within
// glitchWindow, without a raise of its bound, are reported as a bound that
// may be wrong. A spike that comes back at once is no confirmed glitch,
// and glitches spread over minutes are a counter that misreads now and
// then, which no bound explains.
const (
	glitchReport = 16
	glitchWindow = int64(time.Minute)
)

// checkBound reports, once per device, a power bound that its readings,
// the step read at t, show is too low: when a run of glitches raised it,
// or after glitchReport confirmed glitches within glitchWindow that did
// not.
func (m *Monitor) checkBound(d *device, step tracker.Step, t int64) {
	if step.Raised {
		r := d.acc.LastRaise()
		otel.Handle(fmt.Errorf("otelenergy: %s (%s): %w: its counter rose at up to %.0f W, above the bound of %.0f W; the bound is now %.0f W",
			d.ID, d.Name, tracker.ErrBoundExceeded, r.ImpliedWatts, r.From, r.To))
		d.bounded = true
		return
	}
	// confirmed is a ring: the slot written next holds the oldest time.
	k := d.confirmedN % glitchReport
	oldest := d.confirmed[k]
	d.confirmed[k] = t
	d.confirmedN++
	if d.confirmedN < glitchReport || t-oldest > glitchWindow {
		return
	}
	otel.Handle(fmt.Errorf("otelenergy: %s (%s): %w: %d readings within a minute rose faster than %.0f W allows and stayed; the bound is too low or the counter misreads, and each is charged at most the bound",
		d.ID, d.Name, tracker.ErrBoundExceeded, glitchReport, d.PowerBound()))
	d.bounded = true
}

// push records a step of d at at, with the device's cumulative energy.
// It is pushed into the ring by publishTokens, after the pass's token
// totals are known, so that the point's Tokens are the totals published
// with it. Settle, the rings' only reader on the sampler side, runs after.
func (m *Monitor) push(d *device, at int64, total uint64) {
	d.pend, d.pendT, d.pendEnergy = true, at, total
}

// publishTokens publishes the token totals as of the ledger's latest
// Observe and pushes the pass's steps with them. Sampler side.
func (m *Monitor) publishTokens() {
	out, in := m.tokenTotals()
	m.outTokens.Store(out)
	m.inTokens.Store(in)
	for _, d := range m.devs {
		if !d.pend {
			continue
		}
		d.pend = false
		at := d.pendT
		if back, ok := d.ring.Back(0); ok && at < back.T {
			at = back.T
		}
		if err := d.ring.Push(ring.Point{T: at, EnergyMJ: d.pendEnergy, Tokens: out}); err != nil {
			otel.Handle(err) // unreachable: at never goes backwards
		}
	}
}

// tokenTotals sums the three disjoint parts of the token totals: the
// ledger's as of its latest Observe (or flush), and the unowned and late
// reports as of now.
func (m *Monitor) tokenTotals() (out, in uint64) {
	out, in = m.ledger.Tokens()
	return out + m.unownedOut.Load() + m.lateOut.Load(), in + m.unownedIn.Load() + m.lateIn.Load()
}

// tokens returns the token totals: as of the last sample, or as of now
// once the ledger is flushed, when nothing is left for a sample to sum.
func (m *Monitor) tokens() (out, in uint64) {
	if m.flushed.Load() {
		return m.tokenTotals()
	}
	return m.outTokens.Load(), m.inTokens.Load()
}

// AddTokens counts n output tokens: in the request carried by ctx if there
// is one, and in the Monitor's totals. For a request the ledger tracks it
// is one atomic add, on that request's own counter; the request's first
// report also reads the Monitor's clock once, since it marks when the
// request's prefill ended, and so does a report of more than one token,
// since it hides when its tokens came. The sampler sums the
// totals from the requests' counters at each sample, so [Monitor.Totals]
// and the exported token counter include a report from the next sample
// on. Tokens outside any tracked request take one more atomic add, on a
// counter shared by the Monitor. It never allocates and never blocks. A
// negative n, or one above 2^24, is rejected and counted. On a nil
// Monitor it does nothing, so handlers can call it whether or not energy
// metering could start.
//
// Tokens reported in one call are taken as produced evenly since the
// request's previous report, so a handler that reports in chunks or only
// at the end is still attributed correctly, once the ledger's horizon
// covers the wait (see [WithHorizon]).
func (m *Monitor) AddTokens(ctx context.Context, n int) {
	// The request path's floor: a handler passes the Request itself, so a
	// type assertion finds it, and a tracked request's report is one
	// atomic add on its own counter. Everything else takes addTokens.
	if r, ok := ctx.(*Request); ok && r.st.tracked && r.st.m == m && uint(n-1) < maxTokensPerCall {
		total, counted, first := r.st.AddFirstOutput(uint64(n))
		if first || n > 1 {
			r.st.stamp(m, uint64(n), total, first)
		}
		if !counted {
			m.lateOut.Add(uint64(n))
		}
		return
	}
	m.addTokens(ctx, n, outputTokens)
}

// stamp stamps a report of n tokens, which brought the request's output
// to total, with m's clock: the request's first output report, since it
// marks when its prefill ended, and every report of more than one token,
// since it hides when its tokens came. The token path calls it only for
// those, and it is kept out of line so that the other reports' path
// carries no clock call: a request that streams token by token reads the
// clock once.
//
//go:noinline
func (st *requestState) stamp(m *Monitor, n, total uint64, first bool) {
	t := m.now()
	if first {
		st.StampFirstOutput(t, n)
	}
	if n > 1 {
		st.StampChunk(t, total)
	}
}

// AddInputTokens counts n input (prompt) tokens, kept apart from output
// tokens, as [Monitor.AddTokens] does. Input tokens are taken as processed
// between the request's start and its first output token.
func (m *Monitor) AddInputTokens(ctx context.Context, n int) { m.addTokens(ctx, n, inputTokens) }

// AddCachedInputTokens says that n of the input tokens the request in ctx
// reports with [Monitor.AddInputTokens] were served from the server's
// prefix cache (usage.prompt_tokens_details.cached_tokens in vLLM, SGLang
// and OpenAI responses), so that their prefill is not charged: they stay
// counted as input tokens, once, and n adds nothing to the totals. The
// request's span carries the sum as gen_ai.usage.cache_read.input_tokens,
// capped at its input tokens. The contract is [Monitor.AddTokens]': from
// any goroutine, never blocking or allocating, n above 2^24 or negative
// rejected and counted, nothing outside a tracked request.
func (m *Monitor) AddCachedInputTokens(ctx context.Context, n int) {
	m.addTokens(ctx, n, cachedTokens)
}

// tokenKind is what a token report counts.
type tokenKind uint8

const (
	outputTokens tokenKind = iota
	inputTokens
	cachedTokens // a part of the input tokens
)

func (m *Monitor) addTokens(ctx context.Context, n int, kind tokenKind) {
	if m == nil {
		return
	}
	if n <= 0 || n > maxTokensPerCall {
		if n != 0 {
			m.rejected.Add(1)
		}
		return
	}
	r := requestFrom(ctx)
	// A request the ledger does not track (started before the first
	// sample) still reports its tokens; the ledger weighs them as
	// reported outside any request.
	owned := r != nil && r.st.m == m
	tracked := owned && r.st.tracked
	// A tracked request's counter is summed into the totals until the
	// ledger lets the request go (final, dropped or flushed); a report
	// after that (a request that outlived its maximum age, or reports
	// after its End or Shutdown) is refused there and counted as late.
	switch kind {
	case inputTokens:
		if owned && !r.st.AddInput(uint64(n)) {
			m.lateIn.Add(uint64(n))
		}
		if !tracked {
			m.unownedIn.Add(uint64(n))
		}
	case cachedTokens:
		// A part of input tokens already counted: no total moves.
		if owned {
			r.st.AddCached(uint64(n))
		}
	default:
		if owned {
			total, counted, first := r.st.AddFirstOutput(uint64(n))
			if first || n > 1 {
				r.st.stamp(m, uint64(n), total, first)
			}
			if !counted {
				m.lateOut.Add(uint64(n))
			}
		}
		if !tracked {
			m.unownedOut.Add(uint64(n))
		}
	}
}

// Stats are a Monitor's counts of what went wrong or was left out.
type Stats struct {
	// Devices holds one entry per metered device, in [Monitor.Devices]
	// order.
	Devices []DeviceStats
	// Skipped lists the devices the source found but does not read.
	Skipped []Skipped
	// RejectedTokenReports counts AddTokens, AddInputTokens and AddCachedInputTokens calls
	// rejected for a negative or absurd count.
	RejectedTokenReports uint64
	// DroppedRequests counts requests that got no energy because 65,536
	// were already being tracked or waiting for the sampler to take them
	// (a sampler stuck in a device read takes none).
	DroppedRequests uint64
	// ExpiredRequests counts requests not ended within an hour of their
	// start: they stopped accruing then.
	ExpiredRequests uint64
}

// DeviceStats are one device's sampler figures.
type DeviceStats struct {
	// ReadErrors counts failed reads.
	ReadErrors uint64
	// Lost is true once the device stopped answering.
	Lost bool
	// Wraps, Resets, Jitters and Glitches count the counter's anomalies.
	Wraps, Resets, Jitters, Glitches uint64
	// UpdatePeriod is the counter's learned update period, or 0 while it
	// is unknown.
	UpdatePeriod time.Duration
}

// Stats returns the Monitor's counts as of now.
func (m *Monitor) Stats() Stats {
	if m == nil {
		return Stats{}
	}
	s := Stats{
		RejectedTokenReports: m.rejected.Load(),
		DroppedRequests:      m.ledger.Dropped(),
		ExpiredRequests:      m.ledger.Expired(),
		Devices:              make([]DeviceStats, len(m.devs)),
	}
	if sk, ok := m.src.(source.Skipper); ok {
		s.Skipped = sk.Skipped()
	}
	for i, d := range m.devs {
		s.Devices[i] = DeviceStats{
			ReadErrors:   d.errors.Load(),
			Lost:         d.lost.Load(),
			Wraps:        d.acc.Wraps(),
			Resets:       d.acc.Resets(),
			Jitters:      d.acc.Jitters(),
			Glitches:     d.acc.Glitches(),
			UpdatePeriod: time.Duration(d.period.Load()),
		}
	}
	return s
}

// snapshot returns the cumulative totals. t is the snapshot's time; a
// negative t takes the last sample's.
func (m *Monitor) snapshot(t int64) runscope.Snapshot {
	if t < 0 {
		t = max(m.lastSample.Load(), 0)
	}
	out, in := m.tokens()
	s := runscope.Snapshot{
		T:              t,
		EnergyMJ:       make([]uint64, len(m.devs)),
		OutputTokens:   out,
		InputTokens:    in,
		UnattributedMJ: m.ledger.Unattributed(),
	}
	for i, d := range m.devs {
		s.EnergyMJ[i] = d.acc.Total()
	}
	return s
}

// Totals returns the process-cumulative totals as of the last sample:
// energy per device and tokens alike, so a report made since the last
// sample shows from the next one, at most one sampling interval later
// ([WithInterval]). After Shutdown, tokens are as of now. It never waits
// for the sampler. A run's own view is run.Since(m.Totals()).
func (m *Monitor) Totals() Snapshot {
	if m == nil {
		return Snapshot{}
	}
	return m.snapshot(-1)
}

// Run returns the current run, or nil on a nil Monitor.
func (m *Monitor) Run() *Run {
	if m == nil {
		return nil
	}
	return m.run.Load().run
}

// BeginRun ends the current run and begins a new one for model, such as
// after a model load or hot-swap. It takes a sample first, so both runs'
// boundaries fall on the same sample: no energy is counted in both runs or
// in neither. It returns the new run; the ended one keeps its end snapshot.
// On a nil Monitor it returns nil.
func (m *Monitor) BeginRun(model string) *Run {
	if m == nil {
		return nil
	}
	m.sampleMu.Lock()
	defer m.sampleMu.Unlock()
	if !m.shut.Load() {
		m.sampleLocked()
	}
	next, _ := m.scope.Begin(model, m.cfg.now(), m.snapshot(m.lastSample.Load()))
	m.setRun(next)
	return next
}

func (m *Monitor) setRun(r *runscope.Run) {
	attrs := r.Attributes()
	genai := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", m.cfg.genaiOp),
		attribute.String("gen_ai.provider.name", m.cfg.genaiProvider),
	}
	if r.Model() != "" {
		genai = append(genai, runscope.ModelKey.String(r.Model()))
	}
	m.run.Store(&runInfo{
		run:       r,
		spanAttr:  runscope.RunIDKey.String(r.ID()),
		recordOpt: metric.WithAttributeSet(attribute.NewSet(attrs...)),
		jptOpt:    metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{windowKey.String("run")}, attrs...)...)),
		genaiOpt:  metric.WithAttributeSet(attribute.NewSet(genai...)),
	})
}

// counterPeriod returns the slowest learned update period among the
// devices, or the default while none is known.
func (m *Monitor) counterPeriod() int64 {
	var p int64
	for _, d := range m.devs {
		p = max(p, d.period.Load())
	}
	if p == 0 {
		return int64(defaultCounterPeriod)
	}
	return p
}
