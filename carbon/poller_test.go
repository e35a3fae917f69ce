package carbon

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/internal/fakeclock"
)

// fakeClock is a clock tests move by hand.
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock {
	return fakeclock.New(time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC))
}

// reports collects what a poller hands its error handler.
type reports struct {
	mu   sync.Mutex
	errs []error
}

func (r *reports) handle(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *reports) count(target error) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.errs {
		if errors.Is(e, target) {
			n++
		}
	}
	return n
}

func (r *reports) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

// TestPollerStaleness steps a poller over the UK fake on a fake clock:
// a good figure, failures that leave it in force, staleness that brings
// the fallback (said once), and recovery.
func TestPollerStaleness(t *testing.T) {
	f := newFake(t, ukHandler, 200)
	p, err := NewUKGrid("GB", WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	var rep reports
	fallback := Intensity{MgPerKWh: 300_000}
	pl, err := NewPoller(p,
		WithPollInterval(time.Minute), WithStaleAfter(10*time.Minute),
		WithFetchTimeout(200*time.Millisecond), WithFallback(fallback),
		WithPollerClock(clk.Now), WithErrorHandler(rep.handle))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	steps := []struct {
		name         string
		advance      time.Duration
		fault        fault
		figure       float64
		wantErr      error
		wantMg       uint64 // 0: no reading
		wantFallback bool
		wantAge      time.Duration
		wantReports  int
		wantStale    int
	}{
		{name: "before the first answer: the fallback", wantMg: 300_000, wantFallback: true, wantAge: -1},
		{name: "first answer", fault: faultNone, figure: 200, wantMg: 200_000, wantAge: 0},
		{name: "a 500 leaves it in force, reported once", advance: time.Minute, fault: faultServer, wantErr: ErrServer, wantMg: 200_000, wantAge: time.Minute, wantReports: 1},
		{name: "a slow answer: counted, not reported again", advance: time.Minute, fault: faultSlow, wantErr: ErrTimeout, wantMg: 200_000, wantAge: 2 * time.Minute, wantReports: 1},
		{name: "malformed JSON", advance: 5 * time.Minute, fault: faultMalformed, wantErr: ErrMalformed, wantMg: 200_000, wantAge: 7 * time.Minute, wantReports: 1},
		{name: "stale: the fallback, said once", advance: 4 * time.Minute, fault: faultServer, wantErr: ErrServer, wantMg: 300_000, wantFallback: true, wantAge: 11 * time.Minute, wantReports: 2, wantStale: 1},
		{name: "still stale: nothing more said", advance: time.Minute, fault: faultServer, wantErr: ErrServer, wantMg: 300_000, wantFallback: true, wantAge: 12 * time.Minute, wantReports: 2, wantStale: 1},
		{name: "recovery", advance: time.Minute, fault: faultNone, figure: 150, wantMg: 150_000, wantAge: 0, wantReports: 2, wantStale: 1},
		{name: "a new streak is reported again", advance: time.Minute, fault: faultServer, wantErr: ErrServer, wantMg: 150_000, wantAge: time.Minute, wantReports: 3, wantStale: 1},
		{name: "and goes stale again", advance: 10 * time.Minute, fault: faultServer, wantErr: ErrServer, wantMg: 300_000, wantFallback: true, wantAge: 11 * time.Minute, wantReports: 4, wantStale: 2},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		if i > 0 {
			f.fault.Store(int32(s.fault))
			f.setFigure(s.figure)
			err := pl.Poll(ctx)
			if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
				t.Fatalf("%s: Poll = %v, want %v", s.name, err, s.wantErr)
			}
		}
		r := pl.Current()
		if r == nil || r.MgPerKWh != s.wantMg || r.Fallback != s.wantFallback {
			t.Errorf("%s: Current = %+v, want %d mg/kWh, fallback %v", s.name, r, s.wantMg, s.wantFallback)
		}
		age, ok := pl.Age()
		if s.wantAge < 0 {
			if ok {
				t.Errorf("%s: Age = %v before any answer", s.name, age)
			}
		} else if !ok || age != s.wantAge {
			t.Errorf("%s: Age = %v, %v; want %v", s.name, age, ok, s.wantAge)
		}
		if rep.len() != s.wantReports || rep.count(ErrStale) != s.wantStale {
			t.Errorf("%s: %d reports (%d stale), want %d (%d stale): %v", s.name, rep.len(), rep.count(ErrStale), s.wantReports, s.wantStale, rep.errs)
		}
	}
	if got := pl.Failures(); got != 7 {
		t.Errorf("Failures = %d, want 7", got)
	}
}

// TestPollerNoFallback: with no fallback, a stale figure leaves none.
func TestPollerNoFallback(t *testing.T) {
	clk := newFakeClock()
	var rep reports
	var fail atomic.Bool
	p := providerFunc(func(ctx context.Context) (Intensity, error) {
		if fail.Load() {
			return Intensity{}, ErrServer
		}
		return Intensity{MgPerKWh: 90_000, Kind: Average, Source: SourceStatic}, nil
	})
	pl, err := NewPoller(p, WithPollInterval(time.Minute), WithStaleAfter(5*time.Minute),
		WithPollerClock(clk.Now), WithErrorHandler(rep.handle))
	if err != nil {
		t.Fatal(err)
	}
	if pl.Current() != nil {
		t.Fatal("a reading before any answer, with no fallback")
	}
	if err := pl.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	clk.Advance(6 * time.Minute)
	_ = pl.Poll(context.Background())
	if r := pl.Current(); r != nil {
		t.Errorf("stale with no fallback: Current = %+v, want nil", r)
	}
	if rep.count(ErrStale) != 1 {
		t.Errorf("stale reports = %d, want 1", rep.count(ErrStale))
	}
}

type providerFunc func(context.Context) (Intensity, error)

func (f providerFunc) Intensity(ctx context.Context) (Intensity, error) { return f(ctx) }

// TestPollerRetryAfter: a 429 with Retry-After: 7 delays the next fetch
// by 7 s even at a shorter interval; a Poll before then does not ask.
func TestPollerRetryAfter(t *testing.T) {
	f := newFake(t, emHandler, 300)
	p, err := NewElectricityMaps("DE", testSecret(t, testToken), WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	pl, err := NewPoller(p, WithPollInterval(time.Second), WithStaleAfter(time.Hour),
		WithFetchTimeout(time.Second), WithPollerClock(clk.Now), WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	f.fault.Store(int32(faultRateLimited))
	wait, err := pl.poll(context.Background())
	if !errors.Is(err, ErrRateLimited) || wait != 7*time.Second {
		t.Fatalf("poll = %v, %v; want 7s and ErrRateLimited", wait, err)
	}
	f.fault.Store(int32(faultNone))
	clk.Advance(3 * time.Second)
	wait, err = pl.poll(context.Background())
	if !errors.Is(err, ErrRateLimited) || wait != 4*time.Second {
		t.Errorf("poll 3s later = %v, %v; want 4s left and ErrRateLimited", wait, err)
	}
	if got := f.hits.Load(); got != 1 {
		t.Errorf("the provider was asked %d times during its Retry-After, want once", got)
	}
	clk.Advance(4 * time.Second)
	if wait, err := pl.poll(context.Background()); err != nil || wait != time.Second {
		t.Errorf("poll after Retry-After = %v, %v; want the interval and no error", wait, err)
	}
	if r := pl.Current(); r == nil || r.MgPerKWh != 300_000 {
		t.Errorf("Current = %+v", r)
	}
}

// TestPollerRetryAfterLive: the goroutine, at a 1 s interval against a
// provider that answers 429 with Retry-After: 7, asks once in 1.5 s.
func TestPollerRetryAfterLive(t *testing.T) {
	f := newFake(t, emHandler, 300)
	f.fault.Store(int32(faultRateLimited))
	p, err := NewElectricityMaps("DE", testSecret(t, testToken), WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := NewPoller(p, WithPollInterval(time.Second), WithFetchTimeout(time.Second), WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := pl.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.hits.Load(); got != 1 {
		t.Errorf("asked %d times in 1.5 s, want 1 (Retry-After: 7)", got)
	}
}

// TestPollerShutdownCancelsFetch: Shutdown does not wait for a slow
// provider, and the cancelled fetch is not reported as a failure.
func TestPollerShutdownCancelsFetch(t *testing.T) {
	f := newFake(t, ukHandler, 100)
	f.fault.Store(int32(faultSlow))
	p, err := NewUKGrid("GB", WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	var rep reports
	pl, err := NewPoller(p, WithPollInterval(time.Minute), WithFetchTimeout(time.Minute), WithErrorHandler(rep.handle),
		WithFallback(Intensity{MgPerKWh: 250_000, Kind: Average, Source: SourceStatic}))
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Start(); err != nil {
		t.Fatal(err)
	}
	if err := pl.Start(); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); f.hits.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the poller never asked the provider")
		}
		time.Sleep(time.Millisecond)
	}
	// The fetch hangs; the request path still reads at once.
	if r := pl.Current(); r == nil || r.MgPerKWh != 250_000 || !r.Fallback {
		t.Errorf("Current during a hanging fetch = %+v, want the fallback", r)
	}
	began := time.Now()
	if err := pl.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Shutdown took %v with a fetch in flight", took)
	}
	if rep.len() != 0 || pl.Failures() != 0 {
		t.Errorf("shutting down reported %v, counted %d failures", rep.errs, pl.Failures())
	}
	if err := pl.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := pl.Start(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Start after Shutdown = %v", err)
	}
}

func TestPollerConfigErrors(t *testing.T) {
	p := NewStatic(Intensity{MgPerKWh: 1})
	for _, tt := range []struct {
		name string
		p    Provider
		opts []PollerOption
	}{
		{"nil provider", nil, nil},
		{"interval below 1s", p, []PollerOption{WithPollInterval(time.Millisecond)}},
		{"staleness not above the interval", p, []PollerOption{WithPollInterval(time.Minute), WithStaleAfter(time.Minute)}},
		{"timeout above the interval", p, []PollerOption{WithPollInterval(time.Second), WithFetchTimeout(2 * time.Second)}},
		{"negative timeout", p, []PollerOption{WithFetchTimeout(-time.Second)}},
		{"fallback out of range", p, []PollerOption{WithFallback(Intensity{MgPerKWh: maxMgPerKWh + 1})}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewPoller(tt.p, tt.opts...); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestPollerConcurrentSafe: readers on the request path load the reading
// and its age while the goroutine polls a provider whose figure changes;
// every reading seen is one the provider gave, whole.
func TestPollerConcurrentSafe(t *testing.T) {
	f := newFake(t, ukHandler, 100)
	// The poller runs on the real clock: the fake's half hour is now's.
	f.shift.Store(int64(time.Now().Truncate(30 * time.Minute).Sub(time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC))))
	p, err := NewUKGrid("GB", WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := NewPoller(p, WithPollInterval(time.Second), WithFetchTimeout(time.Second),
		WithFallback(Intensity{MgPerKWh: 100_000, Kind: Average, Source: SourceStatic}))
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Start(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := pl.Current()
				if r == nil || r.MgPerKWh%1000 != 0 || r.MgPerKWh < 100_000 || r.MgPerKWh > 200_000 {
					t.Errorf("torn or unknown reading %+v", r)
					return
				}
				pl.Age()
				pl.FigureAge()
			}
		}()
	}
	// Drive extra polls from here too, as a caller of Poll would.
	for i := range 20 {
		f.setFigure(float64(100 + 5*i))
		_ = pl.Poll(context.Background())
	}
	close(stop)
	wg.Wait()
	if err := pl.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := pl.Current(); r == nil || r.Fallback {
		t.Errorf("after polls, Current = %+v", r)
	}
}

// TestPollerDefaultHandler: with no handler given, the poller reports
// through otel.Handle.
func TestPollerDefaultHandler(t *testing.T) {
	var rep reports
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(rep.handle))
	defer otel.SetErrorHandler(prev)
	pl, err := NewPoller(providerFunc(func(context.Context) (Intensity, error) {
		return Intensity{}, ErrServer
	}))
	if err != nil {
		t.Fatal(err)
	}
	_ = pl.Poll(context.Background())
	_ = pl.Poll(context.Background())
	if rep.count(ErrServer) != 1 {
		t.Errorf("otel.Handle got %v, want one ErrServer", rep.errs)
	}
}

// TestPollerDefaultTimeout: a poll interval below the default fetch
// timeout shortens the timeout rather than refuse the configuration.
func TestPollerDefaultTimeout(t *testing.T) {
	pl, err := NewPoller(NewStatic(Intensity{MgPerKWh: 1}), WithPollInterval(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if pl.cfg.timeout != 2*time.Second {
		t.Errorf("timeout = %v, want the 2s interval", pl.cfg.timeout)
	}
}

// TestPollerSameFigureKeepsReading: a poll that gets the same figure
// keeps the reading (so a timeline sees changes, not polls) but renews
// its age; a new figure is a new reading.
func TestPollerSameFigureKeepsReading(t *testing.T) {
	f := newFake(t, emHandler, 300)
	p, err := NewElectricityMaps("FR", testSecret(t, testToken), WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	pl, err := NewPoller(p, WithPollerClock(clk.Now), WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := pl.Current()
	clk.Advance(time.Minute)
	if err := pl.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pl.Current() != first {
		t.Errorf("the same figure made a new reading")
	}
	if age, _ := pl.Age(); age != 0 {
		t.Errorf("Age = %v after a fresh answer, want 0", age)
	}
	f.setFigure(45)
	if err := pl.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := pl.Current(); r == first || r.MgPerKWh != 45_000 || !r.Fetched.Equal(clk.Now()) {
		t.Errorf("a new figure: Current = %+v", r)
	}
}

// stepWall returns t, which carries a monotonic clock reading, with its
// wall clock moved by d (whole seconds) and its monotonic reading kept:
// what an NTP step does to time.Now. It relies on time.Time's layout
// (hasMonotonic, 33 bits of seconds, 30 of nanoseconds in its first
// word); the caller checks that it worked.
func stepWall(t time.Time, d time.Duration) time.Time {
	w := (*uint64)(unsafe.Pointer(&t))
	*w += uint64(int64(d/time.Second)) << 30
	return t
}

// TestPollerWallClockStep: ages are monotonic. A wall clock stepped back
// an hour does not make the age negative, and one stepped forward does
// not make a fresh figure stale.
func TestPollerWallClockStep(t *testing.T) {
	base := time.Now() // with a monotonic reading
	if s := stepWall(base, time.Hour); s.Sub(base) != 0 || s.Round(0).Sub(base.Round(0)) != time.Hour {
		t.Skip("time.Time's layout is not the one stepWall knows")
	}
	var mu sync.Mutex
	mono, wall := time.Duration(0), time.Duration(0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return stepWall(base.Add(mono), wall)
	}
	set := func(m, w time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		mono, wall = m, w
	}
	var rep reports
	var fail atomic.Bool
	pl, err := NewPoller(providerFunc(func(context.Context) (Intensity, error) {
		if fail.Load() {
			return Intensity{}, ErrServer
		}
		return Intensity{MgPerKWh: 200_000, Kind: Average, Source: SourceStatic}, nil
	}), WithPollInterval(time.Minute), WithStaleAfter(10*time.Minute),
		WithFallback(Intensity{MgPerKWh: 300_000}), WithPollerClock(clock), WithErrorHandler(rep.handle))
	if err != nil {
		t.Fatal(err)
	}
	set(time.Minute, 0)
	if err := pl.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	set(2*time.Minute, -time.Hour) // a minute on, the wall clock an hour back
	if age, ok := pl.Age(); !ok || age != time.Minute {
		t.Errorf("wall clock stepped back: Age = %v, %v; want 1m", age, ok)
	}
	fail.Store(true)
	set(3*time.Minute, time.Hour) // the wall clock an hour ahead
	_ = pl.Poll(context.Background())
	if age, _ := pl.Age(); age != 2*time.Minute {
		t.Errorf("wall clock stepped forward: Age = %v, want 2m", age)
	}
	if r := pl.Current(); r == nil || r.Fallback || rep.count(ErrStale) != 0 {
		t.Errorf("a 2-minute-old figure went stale on a wall clock step: %+v, %v", r, rep.errs)
	}
	set(12*time.Minute, -time.Hour)
	_ = pl.Poll(context.Background())
	if r := pl.Current(); r == nil || !r.Fallback || rep.count(ErrStale) != 1 {
		t.Errorf("an 11-minute-old figure with the wall clock back: %+v, %v; want stale", r, rep.errs)
	}
}

// TestPollerRetryAfterCappedByStaleness: a Retry-After longer than the
// figure has left before it goes stale does not delay the fallback: the
// loop wakes when the figure goes stale, puts the fallback in force, and
// then waits out the rest of the Retry-After without asking.
func TestPollerRetryAfterCappedByStaleness(t *testing.T) {
	clk := newFakeClock()
	var limited atomic.Bool
	var asked atomic.Int64
	pl, err := NewPoller(providerFunc(func(context.Context) (Intensity, error) {
		asked.Add(1)
		if limited.Load() {
			return Intensity{}, &StatusError{Provider: "test", Status: 429, RetryAfter: maxRetryAfter, kind: ErrRateLimited}
		}
		return Intensity{MgPerKWh: 200_000, Kind: Average, Source: SourceStatic}, nil
	}), WithPollInterval(time.Minute), WithStaleAfter(10*time.Minute),
		WithFallback(Intensity{MgPerKWh: 300_000}), WithPollerClock(clk.Now), WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if wait, err := pl.poll(ctx); err != nil || wait != time.Minute {
		t.Fatalf("first poll = %v, %v", wait, err)
	}
	limited.Store(true)
	clk.Advance(3 * time.Minute)
	if wait, err := pl.poll(ctx); !errors.Is(err, ErrRateLimited) || wait != 7*time.Minute {
		t.Errorf("429 with Retry-After 6h, 3m into 10m of staleness: wait %v, %v; want the 7m left", wait, err)
	}
	clk.Advance(7*time.Minute + time.Second)
	wait, err := pl.poll(ctx)
	if !errors.Is(err, ErrRateLimited) || wait != maxRetryAfter-7*time.Minute-time.Second {
		t.Errorf("when stale: wait %v, %v; want the rest of the Retry-After", wait, err)
	}
	if r := pl.Current(); r == nil || !r.Fallback || r.MgPerKWh != 300_000 {
		t.Errorf("when stale: Current = %+v, want the fallback", r)
	}
	if r := pl.Current(); r != nil && (r.Kind != Average || r.Source != SourceStatic) {
		t.Errorf("fallback given with no kind or source: %+v, want average and %q", r, SourceStatic)
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("asked %d times, want 2 (none during the Retry-After)", n)
	}
}

// TestPollerFigureStale: a provider that answers every poll but with an
// old period goes stale by the figure's own age (its At plus the
// provider's granularity), not by the fetch's; the loop wakes when it
// would, and a current period brings the figure back.
func TestPollerFigureStale(t *testing.T) {
	f := newFake(t, emHandler, 300) // its figure is for 11:00–12:00
	p, err := NewElectricityMaps("DE", testSecret(t, testToken), WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock() // 11:00
	var rep reports
	pl, err := NewPoller(p, WithPollInterval(5*time.Minute), WithStaleAfter(time.Hour),
		WithFallback(Intensity{MgPerKWh: 250_000}), WithPollerClock(clk.Now), WithErrorHandler(rep.handle))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pl.FigureAge(); ok {
		t.Error("FigureAge before any figure")
	}
	steps := []struct {
		name         string
		advance      time.Duration
		shift        time.Duration // of the provider's period
		wantFigAge   time.Duration
		wantWait     time.Duration
		wantFallback bool
		wantStale    int
	}{
		{name: "the current hour", wantFigAge: 0, wantWait: 5 * time.Minute},
		{name: "the provider lags half an hour", advance: 90 * time.Minute, wantFigAge: 30 * time.Minute, wantWait: 5 * time.Minute},
		{name: "two minutes before the bound: the loop wakes then", advance: 28 * time.Minute, wantFigAge: 58 * time.Minute, wantWait: 2 * time.Minute},
		{name: "past the bound: the fallback, said once", advance: 3 * time.Minute, wantFigAge: 61 * time.Minute, wantWait: 5 * time.Minute, wantFallback: true, wantStale: 1},
		{name: "still old: nothing more said", advance: 5 * time.Minute, wantFigAge: 66 * time.Minute, wantWait: 5 * time.Minute, wantFallback: true, wantStale: 1},
		{name: "a current hour again", advance: 5 * time.Minute, shift: 2 * time.Hour, wantFigAge: 0, wantWait: 5 * time.Minute, wantStale: 1},
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		f.shift.Store(int64(s.shift))
		wait, err := pl.poll(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if age, ok := pl.Age(); !ok || age != 0 {
			t.Errorf("%s: Age = %v, %v; want 0 after an answer", s.name, age, ok)
		}
		if age, ok := pl.FigureAge(); !ok || age != s.wantFigAge {
			t.Errorf("%s: FigureAge = %v, %v; want %v", s.name, age, ok, s.wantFigAge)
		}
		if wait != s.wantWait {
			t.Errorf("%s: wait %v, want %v", s.name, wait, s.wantWait)
		}
		r := pl.Current()
		if r == nil || r.Fallback != s.wantFallback || (!s.wantFallback && r.MgPerKWh != 300_000) {
			t.Errorf("%s: Current = %+v, want fallback %v", s.name, r, s.wantFallback)
		}
		if rep.count(ErrStale) != s.wantStale {
			t.Errorf("%s: %d stale reports, want %d: %v", s.name, rep.count(ErrStale), s.wantStale, rep.errs)
		}
	}
}
