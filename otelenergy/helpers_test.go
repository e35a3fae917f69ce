package otelenergy

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a manual clock shared by a Monitor and a SimulatedSource.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// testRig is a Monitor over a simulated source on a fake clock.
type testRig struct {
	m     *Monitor
	sim   *SimulatedSource
	clock *fakeClock
}

func newRig(t testing.TB, cfg SimulatedConfig, opts ...Option) *testRig {
	t.Helper()
	clock := newFakeClock()
	cfg.Now = clock.Now
	sim, err := NewSimulatedSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]Option{WithClock(clock.Now)}, opts...)
	m, err := NewMonitor(sim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(t.Context()) })
	return &testRig{m: m, sim: sim, clock: clock}
}

// tick advances the clock by d and takes a sample.
func (r *testRig) tick(d time.Duration) {
	r.clock.Advance(d)
	r.m.Sample()
}
