package carbon

import (
	"math"
	"sync"
)

// defaultTimelineCapacity is how many changes a timeline keeps by
// default: at a change every 5 minutes, more than five hours, far beyond
// the ledger's horizon (10 s) and maximum age (an hour).
const defaultTimelineCapacity = 64

// timeline records which [Reading] was in force when, on the caller's
// clock (the ledger's ns), so that an interval split later is converted
// at the intensity in force when it was metered, not at the one in force
// when it is split.
//
// The sampler calls Note with the poller's current reading at
// every read; a change starts at the read that first saw it. An interval
// (a, b] uses the reading in force at b: its energy is the counter's step
// at b, and one interval has one intensity. Because Note stamps a change
// after the newest instant already noted, an interval that ended at or
// before a read that saw the old reading never moves to the new one: a
// figure, once computed, is what it would be if computed again.
//
// A timeline is safe for concurrent use. It must not be copied after
// first use. Its zero value is not usable; build it with newTimeline.
type timeline struct {
	mu   sync.Mutex
	at   []int64
	r    []*Reading
	head int // index of the oldest entry
	n    int
	last int64 // newest instant noted
}

// newTimeline returns a timeline that keeps the last capacity changes
// (at least 2; 64 when capacity is 0 or less).
func newTimeline(capacity int) *timeline {
	if capacity <= 0 {
		capacity = defaultTimelineCapacity
	}
	capacity = max(capacity, 2)
	return &timeline{at: make([]int64, capacity), r: make([]*Reading, capacity)}
}

// Note records that r (nil: none) is in force from t on. A reading equal
// (the same pointer) to the one in force adds nothing, so the sampler can
// call it at every read: that costs a lock and a comparison, and no
// allocation. A change noted at or before the newest instant already
// noted is stamped just after it (newest + 1 ns): an interval ending at
// that instant may already have been converted at the reading then in
// force, and must convert the same if converted again. When full, the
// oldest change is dropped.
func (tl *timeline) Note(t int64, r *Reading) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.n > 0 {
		newest := (tl.head + tl.n - 1) % len(tl.r)
		if tl.r[newest] == r {
			tl.last = max(tl.last, t)
			return
		}
		if t <= tl.last {
			if tl.last == math.MaxInt64 {
				// No later instant: the end of time is its own, and
				// the change replaces the one there, if any.
				t = tl.last
			} else {
				t = tl.last + 1
			}
		}
		if tl.at[newest] == t {
			tl.r[newest] = r
			return
		}
	}
	tl.last = t
	if tl.n == len(tl.r) {
		tl.r[tl.head] = nil
		tl.head = (tl.head + 1) % len(tl.r)
		tl.n--
	}
	i := (tl.head + tl.n) % len(tl.r)
	tl.at[i], tl.r[i] = t, r
	tl.n++
}

// At returns the reading in force at t: the last one noted at or before
// t, and true. For a t before the oldest change kept (the first noted,
// or, once changes were dropped, the oldest left) it returns the oldest
// kept and false: the figure for t is not known exactly. It returns nil
// and false only when nothing was ever noted.
func (tl *timeline) At(t int64) (r *Reading, ok bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.n == 0 {
		return nil, false
	}
	// Binary search for the last entry with at <= t.
	lo, hi := 0, tl.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if tl.at[(tl.head+m)%len(tl.at)] <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return tl.r[tl.head], false
	}
	return tl.r[(tl.head+lo-1)%len(tl.r)], true
}
