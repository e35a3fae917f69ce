package ledger_test

import (
	"sync"
	"testing"

	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/ring"
)

// TestInboxBoundedWhileSamplerAway adds requests while no Observe drains
// the inbox, as when the sampler hangs in a read: the inbox and the active
// requests together never exceed MaxActive, the requests beyond it are
// refused at once (final, flagged, counted), and the ones it took are
// adopted when the sampler comes back.
func TestInboxBoundedWhileSamplerAway(t *testing.T) {
	const max = 8
	l := ledger.New(ledger.Config{Rings: []*ring.Ring{newRing(t)}, MaxActive: max})
	held := []*ledger.Account{account(0, nil), account(0, nil), account(0, nil)}
	for _, r := range held {
		l.Add(r)
	}
	l.Observe(1, 0, 0) // 3 active
	var queued, refused []*ledger.Account
	for range 20 {
		r := account(2, nil)
		l.Add(r)
		if r.Flags()&ledger.FlagDropped != 0 {
			refused = append(refused, r)
		} else {
			queued = append(queued, r)
		}
	}
	if len(queued) != max-len(held) || l.Dropped() != uint64(len(refused)) || len(refused) != 20-(max-len(held)) {
		t.Fatalf("queued %d, refused %d, Dropped %d; want %d queued and the other %d refused and counted",
			len(queued), len(refused), l.Dropped(), max-len(held), 20-(max-len(held)))
	}
	for _, r := range refused {
		if !r.Final() || r.EnergyMJ() != 0 {
			t.Fatalf("refused request: final=%v energy=%d; want final with none", r.Final(), r.EnergyMJ())
		}
	}
	l.Observe(3, 0, 0)
	if got := l.Active(); got != max {
		t.Fatalf("Active = %d after the sampler came back, want %d", got, max)
	}
	if l.Dropped() != uint64(len(refused)) {
		t.Fatalf("Dropped = %d after adoption, want %d: an admitted request was dropped", l.Dropped(), len(refused))
	}
	for _, r := range queued {
		if r.Flags()&ledger.FlagDropped != 0 || r.Final() {
			t.Fatal("an admitted request was dropped on adoption")
		}
	}
}

// TestInboxBoundConcurrentSafe adds from many goroutines at once while the
// sampler is away: exactly MaxActive are admitted, whatever the
// interleaving, and admitted plus refused is everything added.
func TestInboxBoundConcurrentSafe(t *testing.T) {
	const max, workers, each = 1000, 8, 500
	l := ledger.New(ledger.Config{Rings: []*ring.Ring{newRing(t)}, MaxActive: max})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				l.Add(account(0, nil))
			}
		})
	}
	// The sampler drains concurrently too.
	wg.Go(func() {
		for i := range int64(50) {
			l.Observe(i, 0, 0)
		}
	})
	wg.Wait()
	l.Observe(100, 0, 0)
	if got, want := uint64(l.Active())+l.Dropped(), uint64(workers*each); got != want {
		t.Fatalf("active %d + dropped %d = %d, want every request added, %d", l.Active(), l.Dropped(), got, want)
	}
	if l.Active() != max {
		t.Fatalf("Active = %d, want the limit %d", l.Active(), max)
	}
}

// TestInboxRefusalsLeaveNoTrace adds far beyond MaxActive while the
// sampler is away, then drains everything: the refusals must not have
// used up room, so once the ledger is empty again it takes MaxActive new
// requests, and refuses only beyond that.
func TestInboxRefusalsLeaveNoTrace(t *testing.T) {
	const max = 8
	l := ledger.New(ledger.Config{Rings: []*ring.Ring{newRing(t)}, MaxActive: max})
	for range 5 * max {
		l.Add(account(0, nil))
	}
	if got := l.Dropped(); got != 4*max {
		t.Fatalf("Dropped = %d while the sampler was away, want %d", got, 4*max)
	}
	l.Flush(nil) // drains the inbox and ends every request
	if got := l.Active(); got != 0 {
		t.Fatalf("Active = %d after Flush, want 0", got)
	}
	for round := range 3 {
		var refused int
		for range 2 * max {
			r := account(int64(10+round), nil)
			l.Add(r)
			if r.Flags()&ledger.FlagDropped != 0 {
				refused++
			}
		}
		if refused != max {
			t.Fatalf("round %d: %d of %d refused with the ledger empty, want %d", round, refused, 2*max, max)
		}
		l.Observe(int64(10+round), 0, 0)
		if got := l.Active(); got != max {
			t.Fatalf("round %d: Active = %d, want %d", round, got, max)
		}
		l.Flush(nil)
	}
}

// BenchmarkInboxAdd measures Add alone, with room to spare, while one
// goroutine drains the inbox as the sampler does: serial on one
// goroutine, parallel on every P, where requests on different stacks must
// not share a cache line.
func BenchmarkInboxAdd(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := "serial"
		if parallel {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			l := ledger.New(ledger.Config{Rings: []*ring.Ring{newRing(b)}, MaxActive: 1 << 20})
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						l.Flush(nil)
					}
				}
			})
			b.ReportAllocs()
			if parallel {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						l.Add(account(0, nil))
					}
				})
			} else {
				for b.Loop() {
					l.Add(account(0, nil))
				}
			}
			close(stop)
			wg.Wait()
			if d := l.Dropped(); d != 0 {
				b.Fatalf("%d requests refused with room to spare", d)
			}
		})
	}
}
