package ring

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
)

// DefaultCapacity is the capacity of a ring built for the default sampling
// cadence: 8192 points is about 13.6 minutes at 10 Hz. A request older than
// the ring is attributed from the oldest point the ring still holds.
const DefaultCapacity = 8192

// maxCapacity bounds the memory a configuration mistake can allocate:
// 2^24 points are 384 MiB.
const maxCapacity = 1 << 24

// readAttempts bounds how often a reader retries after the writer lapped it.
const readAttempts = 8

var (
	// ErrCapacity reports a capacity below 2 or above 2^24.
	ErrCapacity = errors.New("ring: capacity out of range")
	// ErrTimeBackwards reports a pushed point older than the newest point.
	ErrTimeBackwards = errors.New("ring: point time before the newest point")
)

// Point is one sample: the cumulative energy and the cumulative tokens at
// time T.
type Point struct {
	// T is nanoseconds on the writer's monotonic clock.
	T int64
	// EnergyMJ is the cumulative energy in millijoules.
	EnergyMJ uint64
	// Tokens is the cumulative token count.
	Tokens uint64
}

// Ring is a fixed-capacity ring of [Point]s with one writer and lock-free
// readers. See the package documentation for the protocol.
//
// Push must be called from one goroutine at a time. Every other method is
// safe for concurrent use, with Push and with each other. A Ring must not be
// copied after first use.
type Ring struct {
	// The fields readers use on every probe are read-only after New; the
	// padding keeps the writer's stores to written and lastT off their cache
	// line.
	mask uint64
	t    []atomic.Int64
	e    []atomic.Uint64
	k    []atomic.Uint64
	_    [64]byte

	written atomic.Uint64
	lastT   int64 // read and written only by the writer
}

// New returns an empty ring that holds at least capacity points. The
// capacity is rounded up to a power of two, which [Ring.Cap] reports. A
// capacity below 2 or above 2^24 returns [ErrCapacity].
func New(capacity int) (*Ring, error) {
	if capacity < 2 || capacity > maxCapacity {
		return nil, fmt.Errorf("%w: %d not in [2, %d]", ErrCapacity, capacity, maxCapacity)
	}
	n := 1 << bits.Len(uint(capacity-1))
	return &Ring{
		mask: uint64(n - 1),
		t:    make([]atomic.Int64, n),
		e:    make([]atomic.Uint64, n),
		k:    make([]atomic.Uint64, n),
	}, nil
}

// Cap returns the number of slots. The ring holds at most Cap()-1 points
// visible to readers: one slot is the writer's slack.
func (r *Ring) Cap() int { return len(r.t) }

// Len returns the number of points readers can see.
func (r *Ring) Len() int {
	lo, hi := r.live(r.written.Load())
	return int(hi - lo)
}

// Written returns the number of points ever pushed.
func (r *Ring) Written() uint64 { return r.written.Load() }

// Push appends p, overwriting the oldest point once the ring is full. A p.T
// earlier than the previous point's returns [ErrTimeBackwards] and pushes
// nothing. Push must not be called concurrently with itself.
func (r *Ring) Push(p Point) error {
	n := r.written.Load()
	if n > 0 && p.T < r.lastT {
		return ErrTimeBackwards
	}
	s := n & r.mask
	r.t[s].Store(p.T)
	r.e[s].Store(p.EnergyMJ)
	r.k[s].Store(p.Tokens)
	r.written.Store(n + 1)
	r.lastT = p.T
	return nil
}

// live returns the logical index range [lo, hi) readers may use when
// written is hi.
func (r *Ring) live(hi uint64) (lo, _ uint64) {
	if slack := r.mask; hi > slack { // mask == Cap()-1
		lo = hi - slack
	}
	return lo, hi
}

func (r *Ring) load(j uint64) Point {
	s := j & r.mask
	return Point{T: r.t[s].Load(), EnergyMJ: r.e[s].Load(), Tokens: r.k[s].Load()}
}

// valid reports whether logical index j was not overwritten before the
// reader's validating load of written returned hi2.
func (r *Ring) valid(j, hi2 uint64) bool { return j+r.mask+1 > hi2 }

// Back returns the point k pushes before the newest (0 is the newest). It
// returns false when the ring holds no such point.
func (r *Ring) Back(k int) (Point, bool) { return r.backFrom(k, r.written.Load()) }

// backFrom is Back for a reader whose first load of written returned hi;
// a retry starts from the load that failed validation. Taking that first load as a parameter lets a test
// replay a reader that the writer overtook between its two loads of
// written, and costs Back nothing: Back inlines to this one call.
func (r *Ring) backFrom(k int, hi uint64) (Point, bool) {
	if k < 0 {
		return Point{}, false
	}
	for range readAttempts {
		lo, top := r.live(hi)
		if uint64(k) >= top-lo {
			return Point{}, false
		}
		j := top - 1 - uint64(k)
		p := r.load(j)
		hi = r.written.Load() // validates, and starts the retry
		if r.valid(j, hi) {
			return p, true
		}
	}
	return Point{}, false
}

// AtOrBefore returns the newest point whose time is at or before t. When
// every point is later than t it returns the oldest point. It returns false
// when the ring is empty.
//
// While the writer is overwriting the oldest points faster than a search
// completes, which at a sane sampling cadence never happens, a query that
// falls among the very oldest points may be answered with a slightly newer
// point: each retry steps a few more points away from the oldest end. After
// a bounded number of retries it returns false.
func (r *Ring) AtOrBefore(t int64) (Point, bool) {
	_, p, ok := r.atOrBefore(t, r.written.Load())
	return p, ok
}

// atOrBefore also returns the logical index of the point it found. hi0 is
// the reader's first load of written; a retry starts from the load that
// failed validation. As for backFrom,
// the parameter lets a test replay a reader the writer overtook, at no
// cost: the caller's load is the one the search would make.
func (r *Ring) atOrBefore(t int64, hi0 uint64) (uint64, Point, bool) {
	for attempt := range readAttempts {
		lo, hi := r.live(hi0)
		if lo == hi {
			return 0, Point{}, false
		}
		if attempt > 0 {
			// The writer lapped this reader at the oldest end. Step away
			// from it by a guard that grows with each attempt; the oldest
			// guarded points are the ones it is overwriting.
			lo += min(uint64(1)<<(2*attempt)-1, (hi-lo)/2)
		}
		// Find the first index in [lo, hi) whose time is after t. minProbe
		// is the oldest index read, the only one validation must check:
		// overwrites only ever reach the oldest indices.
		a, b, minProbe := lo, hi, hi
		for a < b {
			mid := a + (b-a)/2
			minProbe = min(minProbe, mid)
			if r.t[mid&r.mask].Load() <= t {
				a = mid + 1
			} else {
				b = mid
			}
		}
		j := lo
		if a > lo {
			j = a - 1
		}
		p := r.load(j)
		hi0 = r.written.Load() // validates, and starts the retry
		if r.valid(min(minProbe, j), hi0) {
			return j, p, true
		}
	}
	return 0, Point{}, false
}
