package periodic

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStopWaitsForTheCall stops the loop while a call is blocked: Stop
// returns only after the call has, and no call starts after it.
func TestStopWaitsForTheCall(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var calls, after atomic.Int32
	var stopped atomic.Bool
	l := Start(time.Millisecond, func() {
		if stopped.Load() {
			after.Add(1)
		}
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
	})
	<-entered
	done := make(chan struct{})
	go func() {
		l.Stop()
		stopped.Store(true)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("Stop returned while a call was still running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-done
	time.Sleep(5 * time.Millisecond)
	if n := after.Load(); n != 0 {
		t.Fatalf("%d calls started after Stop returned", n)
	}
}

// TestNoInterval starts nothing for a non-positive interval; its nil Loop
// stops at once.
func TestNoInterval(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		l := Start(d, func() { t.Error("called") })
		if l != nil {
			t.Fatalf("Start(%v) = %v, want nil", d, l)
		}
		l.Stop()
	}
}

// TestStopConcurrentSafe stops one loop from several goroutines at once.
func TestStopConcurrentSafe(t *testing.T) {
	var calls atomic.Int32
	l := Start(time.Millisecond, func() { calls.Add(1) })
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); l.Stop() }()
	}
	wg.Wait()
	l.Stop()
}
