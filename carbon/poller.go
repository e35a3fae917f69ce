package carbon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
)

// Defaults of a [Poller].
const (
	// DefaultPollInterval suits the providers' granularity: Electricity
	// Maps is hourly, the UK API half-hourly, WattTime five-minutely.
	DefaultPollInterval = 5 * time.Minute
	// DefaultStaleAfter is how old a provider's figure may get before the
	// fallback replaces it: an hour covers a few missed polls of an
	// hourly figure.
	DefaultStaleAfter = time.Hour
	// DefaultFetchTimeout bounds one fetch, login included.
	DefaultFetchTimeout = 10 * time.Second
)

// PollerOption configures a [Poller].
type PollerOption interface {
	apply(*pollerConfig)
}

type pollerOptionFunc func(*pollerConfig)

func (f pollerOptionFunc) apply(c *pollerConfig) { f(c) }

type pollerConfig struct {
	interval   time.Duration
	staleAfter time.Duration
	timeout    time.Duration // 0: the default
	fallback   *Intensity
	now        func() time.Time
	handle     func(error)
}

// WithPollInterval sets how often the provider is asked. The default is
// [DefaultPollInterval]; it must be at least a second.
func WithPollInterval(d time.Duration) PollerOption {
	return pollerOptionFunc(func(c *pollerConfig) { c.interval = d })
}

// WithStaleAfter sets how old the provider's last figure may get before
// the fallback ([WithFallback], or none) takes its place: old by its last
// answer ([Poller.Age]) or by the end of the period it describes
// ([Poller.FigureAge]), whichever is larger. The default is
// [DefaultStaleAfter]; it must be longer than the poll interval.
func WithStaleAfter(d time.Duration) PollerOption {
	return pollerOptionFunc(func(c *pollerConfig) { c.staleAfter = d })
}

// WithFetchTimeout bounds each fetch. The default is
// [DefaultFetchTimeout], or the poll interval if that is shorter; it must
// be positive and at most the poll interval.
func WithFetchTimeout(d time.Duration) PollerOption {
	return pollerOptionFunc(func(c *pollerConfig) { c.timeout = d })
}

// WithFallback sets the intensity in force before the provider's first
// answer and after its figure goes stale; its reading says Fallback. A
// zero Kind is taken as [Average] and an empty Source as [SourceStatic].
// By default there is none: no figure, and no emissions, rather than a
// guess.
func WithFallback(i Intensity) PollerOption {
	if i.Kind == 0 {
		i.Kind = Average
	}
	if i.Source == "" {
		i.Source = SourceStatic
	}
	return pollerOptionFunc(func(c *pollerConfig) { c.fallback = &i })
}

// WithPollerClock sets the clock that stamps fetches and ages them; nil
// keeps the default, time.Now. Ages are the differences of its readings
// from the one taken at [NewPoller], so a clock whose times carry a
// monotonic reading (as time.Now's do) ages figures monotonically.
func WithPollerClock(now func() time.Time) PollerOption {
	return pollerOptionFunc(func(c *pollerConfig) {
		if now != nil {
			c.now = now
		}
	})
}

// WithErrorHandler sets where the poller reports, once per streak, that
// fetches fail and that its figure went stale; nil keeps the default,
// otel.Handle: the poller runs in a goroutine of its own, with no caller
// to return an error to.
func WithErrorHandler(h func(error)) PollerOption {
	return pollerOptionFunc(func(c *pollerConfig) {
		if h != nil {
			c.handle = h
		}
	})
}

// ErrStale is what the poller reports, wrapped, when the provider's
// figure gets older than the staleness bound and the fallback (or none)
// takes its place.
var ErrStale = errors.New("carbon: intensity is stale")

// Poller asks a [Provider] for the intensity at an interval in a
// goroutine of its own, and publishes the last known figure for the
// request path to read with one atomic load ([Poller.Current]).
//
// A failed fetch changes nothing that readers see: the last figure stays
// in force until it is older than the staleness bound ([WithStaleAfter]:
// by its last answer or by its own period, as a provider that keeps
// answering an old hour is no fresher for it), when the fallback (or
// none) replaces it, and the poller says so once through its error
// handler. A 429 or 503 with Retry-After delays the next fetch by at
// least that (at most six hours). The first failure of a streak is
// reported; the rest are counted ([Poller.Failures]).
//
// Current, Age, FigureAge and Failures are safe from any goroutine and
// never block.
// Start, Poll and Shutdown are safe to call concurrently with each other.
// A Poller must not be copied; build it with [NewPoller].
type Poller struct {
	p   Provider
	cfg pollerConfig

	cur      atomic.Pointer[Reading]
	fallback *Reading // nil when none
	// epoch is the clock's reading at NewPoller. Ages are durations since
	// it: with time.Now they are monotonic, so that a step of the wall
	// clock (NTP, a VM resumed) neither makes an age negative nor makes a
	// fresh figure stale.
	epoch    time.Time
	lastGood atomic.Int64 // 1 + ns from epoch to the last good fetch; 0 before
	// figureEnd is the UnixNano instant at which the period the provider's
	// last figure describes ended (its At plus gran); 0 before the first
	// figure, or for one with no instant.
	figureEnd atomic.Int64
	gran      time.Duration // the provider's granularity; 0 when unknown
	failures  atomic.Uint64

	mu       sync.Mutex // serializes polls and guards the fields below
	last     *Reading   // the provider's last figure, in force unless stale
	failing  bool       // the current streak was reported
	stale    bool       // staleness was reported
	notUntil time.Time  // Retry-After: no fetch before this

	life    sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewPoller returns a poller of p; it fetches nothing until [Poller.Start]
// or [Poller.Poll]. Until the first answer, Current is the fallback. It
// returns an error wrapping [ErrInvalidConfig] for a nil provider or an
// interval, staleness or timeout out of range.
func NewPoller(p Provider, opts ...PollerOption) (*Poller, error) {
	c := pollerConfig{
		interval:   DefaultPollInterval,
		staleAfter: DefaultStaleAfter,
		now:        time.Now,
		handle:     otel.Handle,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.timeout == 0 {
		c.timeout = min(DefaultFetchTimeout, c.interval)
	}
	var errs []error
	if p == nil {
		errs = append(errs, fmt.Errorf("%w: no provider", ErrInvalidConfig))
	}
	if c.interval < time.Second {
		errs = append(errs, fmt.Errorf("%w: poll interval %v below 1s", ErrInvalidConfig, c.interval))
	}
	if c.staleAfter <= c.interval {
		errs = append(errs, fmt.Errorf("%w: staleness %v not above the poll interval %v", ErrInvalidConfig, c.staleAfter, c.interval))
	}
	if c.timeout <= 0 || c.timeout > c.interval {
		errs = append(errs, fmt.Errorf("%w: fetch timeout %v: want above 0 and at most the poll interval %v", ErrInvalidConfig, c.timeout, c.interval))
	}
	if c.fallback != nil && c.fallback.MgPerKWh > maxMgPerKWh {
		errs = append(errs, fmt.Errorf("%w: fallback intensity %d mg/kWh", ErrInvalidConfig, c.fallback.MgPerKWh))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	pl := &Poller{p: p, cfg: c, epoch: c.now()}
	if g, ok := p.(granular); ok {
		pl.gran = g.granularity()
	}
	if c.fallback != nil {
		pl.fallback = &Reading{Intensity: *c.fallback, Fallback: true}
		pl.cur.Store(pl.fallback)
	}
	return pl, nil
}

// Current returns the reading in force: the provider's last figure, the
// fallback, or nil when there is none. It is one atomic load, allocates
// nothing and never waits for a fetch. The reading must not be modified.
func (pl *Poller) Current() *Reading { return pl.cur.Load() }

// Age returns the time since the provider's last good answer, on a
// monotonic clock, and false before the first. It is what the intensity
// age gauge exports; the figure's own age is [Poller.FigureAge].
func (pl *Poller) Age() (time.Duration, bool) {
	return pl.age(pl.cfg.now())
}

// age is the time from the last good fetch to now, never negative, and
// false before the first.
func (pl *Poller) age(now time.Time) (time.Duration, bool) {
	t := pl.lastGood.Load()
	if t == 0 {
		return 0, false
	}
	return max(now.Sub(pl.epoch)-time.Duration(t-1), 0), true
}

// FigureAge returns how long ago the period that the provider's last
// figure describes ended: its [Intensity.At] plus the provider's
// granularity (an hour for Electricity Maps, half an hour for the UK API,
// five minutes for WattTime, none for another [Provider]). It is 0 while
// that period runs, and false before the first figure or for one with no
// At. Unlike [Poller.Age] it is on the wall clock, against the provider's
// stamp. A provider that keeps answering an old period keeps Age small
// and makes FigureAge grow; staleness is judged by the larger of the two.
func (pl *Poller) FigureAge() (time.Duration, bool) {
	return pl.figureAge(pl.cfg.now())
}

func (pl *Poller) figureAge(now time.Time) (time.Duration, bool) {
	e := pl.figureEnd.Load()
	if e == 0 {
		return 0, false
	}
	return max(now.Sub(time.Unix(0, e)), 0), true
}

// granular is what this package's providers tell of their figures: how
// long one describes, from its At.
type granular interface{ granularity() time.Duration }

// Failures returns how many fetches have failed.
func (pl *Poller) Failures() uint64 { return pl.failures.Load() }

// Poll fetches once, now (unless a Retry-After is still running, when it
// returns its error without asking), publishes the figure, and applies
// the staleness bound. It returns the fetch's error, which it also
// reports as the goroutine would. Tests and callers that drive their own
// schedule use it instead of Start, on the same clock.
func (pl *Poller) Poll(ctx context.Context) error {
	_, err := pl.poll(ctx)
	return err
}

// errRetryLater is Poll's answer while a Retry-After runs.
var errRetryLater = fmt.Errorf("%w: waiting out the provider's Retry-After", ErrRateLimited)

// poll is one round; it returns how long to wait before the next.
func (pl *Poller) poll(ctx context.Context) (time.Duration, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	now := pl.cfg.now()
	if wait := pl.notUntil.Sub(now); wait > 0 {
		pl.checkStale(now)
		return pl.capWait(wait, now), errRetryLater
	}
	fctx, cancel := context.WithTimeout(ctx, pl.cfg.timeout)
	it, err := pl.p.Intensity(fctx)
	cancel()
	now = pl.cfg.now()
	wait := pl.cfg.interval
	if err == nil && it.MgPerKWh > maxMgPerKWh {
		err = fmt.Errorf("%w: intensity %d mg/kWh out of range", ErrMalformed, it.MgPerKWh)
	}
	if err != nil && ctx.Err() != nil {
		return wait, err // shutting down: not the provider's failure
	}
	if err != nil {
		pl.failures.Add(1)
		var se *StatusError
		if errors.As(err, &se) && se.RetryAfter > 0 {
			pl.notUntil = now.Add(se.RetryAfter)
			wait = max(wait, se.RetryAfter)
		}
		if !pl.failing {
			pl.failing = true
			pl.cfg.handle(fmt.Errorf("carbon: fetching the intensity (the last figure stays in force up to %v old; further failures are counted, not reported): %w", pl.cfg.staleAfter, err))
		}
		pl.checkStale(now)
		return pl.capWait(wait, now), err
	}
	pl.failing = false
	pl.notUntil = time.Time{}
	pl.lastGood.Store(1 + int64(max(now.Sub(pl.epoch), 0)))
	// The same figure again keeps its reading, so that a timeline records
	// changes, not polls.
	if pl.last == nil || !sameIntensity(pl.last.Intensity, it) {
		pl.last = &Reading{Intensity: it, Fetched: now}
		var end int64
		// An At that UnixNano cannot hold (before 1678 or after 2261) is
		// taken as none, as a zero one is.
		if y := it.At.Year(); !it.At.IsZero() && y > 1677 && y < 2262 {
			end = max(it.At.Add(pl.gran).UnixNano(), 1)
		}
		pl.figureEnd.Store(end)
	}
	if !pl.checkStale(now) {
		pl.stale = false
		pl.cur.Store(pl.last)
	}
	return pl.capWait(wait, now), nil
}

func sameIntensity(a, b Intensity) bool {
	return a.MgPerKWh == b.MgPerKWh && a.Kind == b.Kind && a.Source == b.Source && a.Zone == b.Zone && a.At.Equal(b.At)
}

// staleness is how old the provider's figure is, for the staleness
// bound: the larger of its fetch's age and its own (FigureAge). It is
// false before the first good fetch.
func (pl *Poller) staleness(now time.Time) (fetch, figure time.Duration, ok bool) {
	fetch, ok = pl.age(now)
	figure, _ = pl.figureAge(now)
	return fetch, figure, ok
}

// capWait shortens wait so that the loop wakes when the provider's
// figure goes stale, to put the fallback in force on time.
func (pl *Poller) capWait(wait time.Duration, now time.Time) time.Duration {
	fetch, figure, ok := pl.staleness(now)
	if !ok || pl.stale {
		return wait
	}
	return min(wait, max(pl.cfg.staleAfter-max(fetch, figure), time.Millisecond))
}

// checkStale puts the fallback (or none) in force when the provider's
// figure is older than the bound, by its fetch or by its own period, and
// reports it once per streak. It reports whether the figure is stale.
// pl.mu is held.
func (pl *Poller) checkStale(now time.Time) bool {
	fetch, figure, ok := pl.staleness(now)
	if !ok || max(fetch, figure) <= pl.cfg.staleAfter {
		return false
	}
	if pl.stale {
		return true
	}
	pl.stale = true
	pl.cur.Store(pl.fallback)
	what := "no intensity: emissions are not counted"
	if pl.fallback != nil {
		what = fmt.Sprintf("the fallback %s %s intensity of %g g/kWh is used", pl.fallback.Source, pl.fallback.Kind, pl.fallback.GramsPerKWh())
	}
	why := fmt.Sprintf("the provider's last answer is %v old", fetch.Round(time.Second))
	if figure > fetch {
		why = fmt.Sprintf("the provider's figure is for %s, a period that ended %v ago", pl.last.At.UTC().Format(time.RFC3339), figure.Round(time.Second))
	}
	pl.cfg.handle(fmt.Errorf("%w: %s, above %v; %s until it answers a current figure", ErrStale, why, pl.cfg.staleAfter, what))
	return true
}

// Start fetches in a goroutine of its own, at once and then every poll
// interval (or later, as Retry-After asks), until Shutdown. It does not
// wait for the first answer. It is idempotent; after Shutdown it returns
// an error wrapping [ErrInvalidConfig].
func (pl *Poller) Start() error {
	pl.life.Lock()
	defer pl.life.Unlock()
	if pl.closed {
		return fmt.Errorf("%w: poller shut down", ErrInvalidConfig)
	}
	if pl.started {
		return nil
	}
	pl.started = true
	ctx, cancel := context.WithCancel(context.Background())
	pl.cancel, pl.done = cancel, make(chan struct{})
	go pl.loop(ctx, pl.done)
	return nil
}

func (pl *Poller) loop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		wait, _ := pl.poll(ctx)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Shutdown stops the goroutine, cancelling a fetch in flight, and waits
// for it to exit or ctx to end. The last reading stays readable. It is
// idempotent.
func (pl *Poller) Shutdown(ctx context.Context) error {
	pl.life.Lock()
	pl.closed = true
	cancel, done := pl.cancel, pl.done
	pl.cancel = nil
	pl.life.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
