package ring_test

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/otelenergy/otelenergy/ring"
)

const benchPoints = ring.DefaultCapacity

// searchFloor is the physical floor for AtOrBefore: the same binary search
// over a plain slice of the same points, with no synchronization at all.
func searchFloor(pts []ring.Point, t int64) (ring.Point, bool) {
	if len(pts) == 0 {
		return ring.Point{}, false
	}
	a, b := 0, len(pts)
	for a < b {
		mid := a + (b-a)/2
		if pts[mid].T <= t {
			a = mid + 1
		} else {
			b = mid
		}
	}
	if a == 0 {
		return pts[0], true
	}
	return pts[a-1], true
}

// rwRing is the contended baseline: a plain ring behind a sync.RWMutex.
type rwRing struct {
	mu      sync.RWMutex
	pts     []ring.Point
	written int
}

func (r *rwRing) push(p ring.Point) {
	r.mu.Lock()
	r.pts[r.written%len(r.pts)] = p
	r.written++
	r.mu.Unlock()
}

func (r *rwRing) atOrBefore(t int64) (ring.Point, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := min(r.written, len(r.pts))
	if n == 0 {
		return ring.Point{}, false
	}
	lo := r.written - n
	at := func(i int) ring.Point { return r.pts[(lo+i)%len(r.pts)] }
	a, b := 0, n
	for a < b {
		mid := a + (b-a)/2
		if at(mid).T <= t {
			a = mid + 1
		} else {
			b = mid
		}
	}
	if a == 0 {
		return at(0), true
	}
	return at(a - 1), true
}

func benchPoint(i int64) ring.Point {
	return ring.Point{T: i * 100e6, EnergyMJ: uint64(i) * 30, Tokens: uint64(i) * 4}
}

// queries returns random times spread over [0, span), fixed by seed.
func queries(seed uint64, span int64) []int64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	q := make([]int64, 4096)
	for i := range q {
		q[i] = rng.Int64N(span)
	}
	return q
}

var sink ring.Point

func BenchmarkRing(b *testing.B) {
	b.Run("Push", func(b *testing.B) {
		r := mustNew(b, benchPoints)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := r.Push(benchPoint(int64(i))); err != nil {
				b.Fatal(err)
			}
		}
	})

	full := mustNew(b, benchPoints)
	var plain []ring.Point
	for i := int64(0); i < 3*benchPoints; i++ {
		full.Push(benchPoint(i))
	}
	for k := full.Len() - 1; k >= 0; k-- {
		p, _ := full.Back(k)
		plain = append(plain, p)
	}
	oldest, newest := plain[0].T, plain[len(plain)-1].T
	qs := queries(1, newest-oldest+1)

	b.Run("AtOrBefore", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			sink, _ = full.AtOrBefore(oldest + qs[i&4095])
		}
	})
	b.Run("Back", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			sink, _ = full.Back(i & 4095)
		}
	})
	b.Run("SearchFloor", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			sink, _ = searchFloor(plain, oldest+qs[i&4095])
		}
	})

	// Contended: readers under RunParallel while one goroutine pushes
	// continuously. Readers query random times across the ring as it is
	// when they ask, read from the writer's published newest time.
	contended := func(b *testing.B, push func(ring.Point), query func(int64)) {
		var newestT atomic.Int64
		for i := int64(0); i < benchPoints; i++ {
			push(benchPoint(i))
		}
		newestT.Store(benchPoint(benchPoints - 1).T)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(benchPoints); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := benchPoint(i)
				push(p)
				newestT.Store(p.T)
			}
		}()
		span := benchPoint(benchPoints - 2).T
		var seed atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			qs := queries(seed.Add(1), span)
			for i := 0; pb.Next(); i++ {
				query(newestT.Load() - qs[i&4095])
			}
		})
		b.StopTimer()
		close(stop)
		wg.Wait()
	}
	b.Run("AtOrBeforeContended/seqlock", func(b *testing.B) {
		r := mustNew(b, benchPoints)
		contended(b, func(p ring.Point) { r.Push(p) }, func(t int64) {
			if _, ok := r.AtOrBefore(t); !ok {
				b.Error("AtOrBefore found no point in a full ring")
			}
		})
	})
	b.Run("AtOrBeforeContended/rwmutex", func(b *testing.B) {
		r := &rwRing{pts: make([]ring.Point, benchPoints)}
		contended(b, r.push, func(t int64) {
			if _, ok := r.atOrBefore(t); !ok {
				b.Error("atOrBefore found no point in a full ring")
			}
		})
	})
}
