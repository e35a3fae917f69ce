package fakeclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/fakeclock"
)

func TestClock(t *testing.T) {
	c := fakeclock.New(fakeclock.Epoch())
	if !c.Now().Equal(fakeclock.Epoch()) || c.Nanos() != 0 {
		t.Fatalf("a new clock reads %v (%d ns)", c.Now(), c.Nanos())
	}
	c.Advance(1500 * time.Millisecond)
	c.Sleep(500 * time.Millisecond)
	if got := c.Now().Sub(fakeclock.Epoch()); got != 2*time.Second || c.Nanos() != int64(2*time.Second) {
		t.Fatalf("after 2 s: %v, %d ns", got, c.Nanos())
	}
	c.Set(fakeclock.Epoch().Add(-time.Minute))
	if got := c.Now().Sub(fakeclock.Epoch()); got != -time.Minute {
		t.Fatalf("after Set back: %v", got)
	}
	read := c.Stepping(time.Second)
	if a, b := read(), read(); b-a != int64(time.Second) {
		t.Fatalf("Stepping readings %d, %d: not a second apart", a, b)
	}
}

func TestClockConcurrentSafe(t *testing.T) {
	c := fakeclock.New(fakeclock.Epoch())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	if got := c.Now().Sub(fakeclock.Epoch()); got != 4*time.Second {
		t.Fatalf("4000 advances of 1 ms: %v", got)
	}
}
