package simgpu_test

import (
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/fakeclock"
	"github.com/otelenergy/otelenergy/simgpu"
)

// fakeClock is the module's manual clock, shared by a GPU and its test.
type fakeClock = fakeclock.Clock

var epoch = fakeclock.Epoch()

func newFakeClock() *fakeClock { return fakeclock.New(epoch) }

// at moves c to epoch + ms milliseconds.
func at(c *fakeClock, ms float64) {
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
