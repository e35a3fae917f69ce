package simgpu_test

import (
	"sync"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/simgpu"
)

// fakeClock is a manual clock shared by a GPU and its test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newFakeClock() *fakeClock { return &fakeClock{t: epoch} }

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

// Set moves the clock to t, backwards too.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// at moves the clock to epoch + ms milliseconds.
func (c *fakeClock) at(ms float64) {
	c.Set(epoch.Add(time.Duration(ms * float64(time.Millisecond))))
}

// newGPU returns a GPU on a fresh fake clock.
func newGPU(t testing.TB, c simgpu.Config) (*simgpu.GPU, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	c.Now = clk.Now
	g, err := simgpu.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return g, clk
}

func read(t testing.TB, g *simgpu.GPU, i int) uint64 {
	t.Helper()
	v, err := g.ReadEnergy(i)
	if err != nil {
		t.Fatalf("ReadEnergy(%d): %v", i, err)
	}
	return v
}
