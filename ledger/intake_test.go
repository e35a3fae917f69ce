package ledger

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestIntakeConcurrentSafe runs the intake stage alone: goroutines add
// and end requests while one drains the stacks and republishes the room
// as a sampler does, holding what it drained as active. Every request is
// either refused or drained exactly once; what waits never exceeds the
// room published, but for adds about to be refused; and the ends
// counted, with their times, are exactly those of the requests ended.
func TestIntakeConcurrentSafe(t *testing.T) {
	const (
		bound   = 100
		workers = 8
		each    = 3000
	)
	var in intake
	in.setRoom(bound)
	var refused, endSum atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	seen := make(map[*Account]int)
	held, room := 0, bound
	drainOnce := func() {
		in.drain(func(r *Account) {
			seen[r]++
			held++
		})
		// An add counts itself before it checks the room, and uncounts
		// itself when refused: each adder may stand one over for a moment.
		if q, _, _ := in.waiting(); int(q) > room+workers {
			t.Errorf("%d waiting, beyond the room %d published", q, room)
		}
		held /= 2 // half of them finish
		room = bound - held
		in.setRoom(room)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			drainOnce()
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				r := newAccount(int64(k), nil)
				// As Ledger.Add adds.
				if first := shardOf(r); !in.inbox[first].push(r) && !in.spill(r, first) {
					refused.Add(1)
					continue
				}
				if k%3 == 0 {
					end := int64(w*each + k)
					r.End(end)
					in.ended(r)
					endSum.Add(end)
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	<-done
	drainOnce()
	for r, n := range seen {
		if n != 1 {
			t.Fatalf("request %p drained %d times", r, n)
		}
	}
	if got, want := len(seen)+int(refused.Load()), workers*each; got != want {
		t.Errorf("%d drained and %d refused of %d added", len(seen), refused.Load(), want)
	}
	if refused.Load() == 0 {
		t.Error("no request was refused: the bound was never reached")
	}
	n, sum := in.endedSum()
	var ends int64
	for r := range seen {
		if _, ok := r.Ended(); ok {
			ends++
		}
	}
	if n != ends || int64(sum) != endSum.Load() {
		t.Errorf("ends counted %d summing %d, want %d summing %d", n, sum, ends, endSum.Load())
	}
	if q, e, s := in.waiting(); q != 0 || e != n || s != sum {
		t.Errorf("waiting %d with %d ends summing %d, want none and the same ends", q, e, s)
	}
}
