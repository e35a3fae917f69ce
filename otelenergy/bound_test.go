package otelenergy

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/tracker"
)

// powerStep is a staircase counter on a fake clock whose board draws
// before W until change, then after W.
type powerStep struct {
	clock         *fakeClock
	start         time.Time
	period        time.Duration
	change        time.Duration
	before, after uint64
}

// energy is the energy drawn in the first d, in mJ (d in whole ms).
func (p powerStep) energy(d time.Duration) uint64 {
	ms := uint64(d / time.Millisecond)
	c := uint64(p.change / time.Millisecond)
	if ms <= c {
		return p.before * ms
	}
	return p.before*c + p.after*(ms-c)
}

// read returns the counter: the energy up to its last publication.
func (p powerStep) read() uint64 {
	return p.energy(p.clock.Now().Sub(p.start) / p.period * p.period)
}

// errCollector records what otel.Handle reports, for one test.
type errCollector struct {
	mu   sync.Mutex
	errs []error
}

func (c *errCollector) Handle(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

func (c *errCollector) matching(target error) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []error
	for _, e := range c.errs {
		if errors.Is(e, target) {
			out = append(out, e)
		}
	}
	return out
}

// collectErrors routes otel.Handle to a collector until the test ends.
func collectErrors(t *testing.T) *errCollector {
	c := &errCollector{}
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(c)
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	return c
}

// TestBoundFromStaleLimitLearnsTheBoard bounds a board by a 300 W limit
// (× 1.5 = 450 W), then the limit is raised and the board draws 600 W on
// a 100 ms counter: every step is above the bound. After a short learning
// run the tracker must accept the board's real power, report the wrong
// bound once through otel.Handle, and meter what the counter counted.
func TestBoundFromStaleLimitLearnsTheBoard(t *testing.T) {
	errs := collectErrors(t)
	clock := newFakeClock()
	gpu := powerStep{clock: clock, start: clock.Now(), period: 100 * time.Millisecond, change: 5 * time.Second, before: 300, after: 600}
	src, err := NewFuncSource([]Device{{ID: "GPU-0", Name: "probe", MaxWatts: 450}}, func(int) (uint64, error) { return gpu.read(), nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(7 * time.Millisecond)
	m, err := NewMonitor(src, WithClock(clock.Now), WithMeterProvider(mpNoop()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(t.Context())
	m.Sample()
	first := gpu.read()
	var atChange uint64
	for clock.Now().Sub(gpu.start) < 20*time.Second {
		clock.Advance(DefaultInterval)
		m.Sample()
		if atChange == 0 && clock.Now().Sub(gpu.start) >= gpu.change {
			atChange = m.Totals().EnergyMJ[0]
		}
	}
	counted := gpu.read() - first
	metered := m.Totals().EnergyMJ[0]
	trueAfter := counted - (gpu.energy(gpu.change) - first)
	meteredAfter := metered - atChange
	glitches := m.Stats().Devices[0].Glitches
	t.Logf("%d glitches; after the change %.1f%% of the energy metered (%d of %d mJ); %d of %d mJ in all",
		glitches, 100*float64(meteredAfter)/float64(trueAfter), meteredAfter, trueAfter, metered, counted)
	if metered > counted {
		t.Fatalf("metered %d mJ, more than the counter counted, %d", metered, counted)
	}
	if float64(meteredAfter) < 0.99*float64(trueAfter) {
		t.Errorf("after the change only %.1f%% of the energy was metered, want at least 99%%", 100*float64(meteredAfter)/float64(trueAfter))
	}
	if glitches > 10 {
		t.Errorf("%d glitches: the bound was not learned", glitches)
	}
	got := errs.matching(tracker.ErrBoundExceeded)
	if len(got) != 1 {
		t.Fatalf("otel.Handle got %d bound reports (%v), want exactly one", len(got), got)
	}
	if msg := got[0].Error(); !strings.Contains(msg, "GPU-0") || !strings.Contains(msg, "above the bound of 450 W") {
		t.Errorf("bound report %q does not name the device and its bound", msg)
	}
	t.Log(got[0])
}

// TestBoundFarTooLowIsReportedOnce bounds a 600 W board at 100 W, too far
// below it to be learned (beyond tracker.MaxBoundGrowth): the device is
// reported once, after the glitches show it, and not again.
func TestBoundFarTooLowIsReportedOnce(t *testing.T) {
	errs := collectErrors(t)
	clock := newFakeClock()
	gpu := powerStep{clock: clock, start: clock.Now(), period: 100 * time.Millisecond, before: 600, after: 600}
	src, err := NewFuncSource([]Device{{ID: "GPU-7", Name: "capped", MaxWatts: 100}}, func(int) (uint64, error) { return gpu.read(), nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMonitor(src, WithClock(clock.Now), WithMeterProvider(mpNoop()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(t.Context())
	m.Sample()
	for range 600 { // 10 s
		clock.Advance(DefaultInterval)
		m.Sample()
	}
	got := errs.matching(tracker.ErrBoundExceeded)
	if len(got) != 1 || !strings.Contains(got[0].Error(), "GPU-7") {
		t.Fatalf("otel.Handle got %v, want one report naming GPU-7", got)
	}
	if g := m.Stats().Devices[0].Glitches; g < glitchReport {
		t.Fatalf("%d glitches, want at least %d", g, glitchReport)
	}
	t.Log(got[0])
}

// TestBoundFirmIsNeverRaised runs the stale-limit probe against a firm
// bound, one the board's own limits fix (as NVML's
// GetPowerManagementLimitConstraints does): glitches against it are a
// misreading, so the bound stays, each glitch is charged at most the
// bound, and the device is reported once as misreading.
func TestBoundFirmIsNeverRaised(t *testing.T) {
	errs := collectErrors(t)
	clock := newFakeClock()
	gpu := powerStep{clock: clock, start: clock.Now(), period: 100 * time.Millisecond, change: time.Second, before: 300, after: 600}
	src, err := NewFuncSource([]Device{{ID: "GPU-0", Name: "firm", MaxWatts: 450, MaxWattsFirm: true}}, func(int) (uint64, error) { return gpu.read(), nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMonitor(src, WithClock(clock.Now), WithMeterProvider(mpNoop()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(t.Context())
	m.Sample()
	const run = 10 * time.Second
	for clock.Now().Sub(gpu.start) < run {
		clock.Advance(DefaultInterval)
		m.Sample()
	}
	metered := m.Totals().EnergyMJ[0]
	// The tracker's ceiling at the firm bound: 450 W × (2 × 10 s + 1 s).
	if ceiling := uint64(450 * (2*run + time.Second) / time.Millisecond); metered > ceiling {
		t.Errorf("metered %d mJ, above the firm bound's ceiling %d", metered, ceiling)
	}
	got := errs.matching(tracker.ErrBoundExceeded)
	if len(got) != 1 || strings.Contains(got[0].Error(), "the bound is now") {
		t.Fatalf("otel.Handle got %v, want one report that raised nothing", got)
	}
	t.Logf("%d glitches, %d mJ metered of %d counted; %v", m.Stats().Devices[0].Glitches, metered, gpu.read(), got[0])
}

// TestBoundReportCountsOnlyRecentConfirmedGlitches checks that the "bound
// too low" report is about a bound, not about a counter that misreads now
// and then: single spikes that come back at once, and permanent jumps
// spread over minutes, are glitches that no bound explains, and are not
// reported however many there are.
func TestBoundReportCountsOnlyRecentConfirmedGlitches(t *testing.T) {
	tests := []struct {
		name string
		// offset is what the counter shows above a steady 300 W at the
		// n-th sample.
		offset func(n int) uint64
	}{
		{name: "single spikes that recover", offset: func(n int) uint64 {
			if n%10 == 5 {
				return 1_000_000
			}
			return 0
		}},
		{name: "confirmed jumps, one every 5 s", offset: func(n int) uint64 {
			return uint64(n/300) * 1_000_000 // 300 samples of 17 ms
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := collectErrors(t)
			clock := newFakeClock()
			gpu := powerStep{clock: clock, start: clock.Now(), period: 100 * time.Millisecond, before: 300, after: 300}
			n := 0
			src, err := NewFuncSource([]Device{{ID: "GPU-0", Name: "spiky", MaxWatts: 450}}, func(int) (uint64, error) { return gpu.read() + tt.offset(n), nil }, nil)
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewMonitor(src, WithClock(clock.Now), WithMeterProvider(mpNoop()))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Shutdown(t.Context())
			for n = 0; n < 6000; n++ { // 102 s
				m.Sample()
				clock.Advance(DefaultInterval)
			}
			if g := m.Stats().Devices[0].Glitches; g <= glitchReport {
				t.Fatalf("%d glitches, want more than %d for the case to mean anything", g, glitchReport)
			}
			if got := errs.matching(tracker.ErrBoundExceeded); len(got) != 0 {
				t.Errorf("otel.Handle got %v, want no bound report", got)
			}
		})
	}
}
