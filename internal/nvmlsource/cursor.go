package nvmlsource

import "time"

// SampleCursor is one consumer's position in one board's utilization
// samples: the lastSeenTimeStamp it passes to GetProcessUtilization, and
// a record of the samples it has taken, so that a step of the wall clock
// neither hides samples nor counts one twice.
//
// NVML stamps each sample with the CPU's wall clock in µs and returns
// those stamped after the caller's timestamp. When the wall clock steps
// back by Δ (NTP, a VM resume), the new samples are stamped below the
// newest one taken and a plain cursor skips Δ of them. A SampleCursor
// detects the step and lowers its query, so that they come back; the
// driver's buffer still holds the old timeline's samples, whose stamps
// overlap the new ones, and the record of the (pid, stamp) pairs taken
// tells them apart.
//
// # Use
//
// A read calls [SampleCursor.Since] with the clocks now, passes what it
// returns to GetProcessUtilization, and calls [SampleCursor.Take] for each
// sample returned, counting those it accepts. Since also folds the
// previous read's takes into the cursor.
//
// # Guarantees
//
//   - A sample (pid, stamp) is accepted at most once, whatever the clock
//     does. Two distinct samples with one pid and one stamp (a step of a
//     whole number of sample periods to the µs) are one sample to it: the
//     second is lost, not counted twice.
//   - Without a step the query is the newest stamp taken, as NVML's
//     documentation intends, and a sample at or before it is refused: a
//     pid's stale sample repeated by the driver is not counted twice.
//   - A step back is recovered in full while the record holds every sample
//     stamped after the step: it keeps the newest [cursorRecord] samples
//     taken (57 s of 3 processes sampled 6 times a second). Past it, the
//     query stays above the record's oldest and the samples stamped below
//     it are lost, as without recovery; none is counted twice.
//   - A step forward needs nothing: the new stamps are above the old.
//
// # Cost
//
// The record is allocated on the first take (16 KiB) and reused: a read
// allocates nothing. Without a step, a sample goes after the record's
// newest, or, stamped a little before it (processes are sampled at
// instants of their own), a few places back, found by binary search.
// Only while recovering do samples land deep in the record, or repeat,
// and move up to its length.
//
// The zero value is ready to use. A SampleCursor is not safe for
// concurrent use, and must not be copied after first use.
type SampleCursor struct {
	// query is the lastSeenTimeStamp of the current read: samples at or
	// before it are refused.
	query uint64
	// high is the newest stamp taken before the current read.
	high uint64
	// mark is the newest stamp of the timeline a step left behind:
	// recovery lasts while query < mark.
	mark uint64
	// next and nextHeld are the current read's newest stamps that may
	// advance the query: plausible on the clock now, and, while
	// recovering, older than recoveryHold.
	next, nextHeld uint64
	// newest is the newest stamp taken by the current read.
	newest uint64
	// limit and heldLimit bound next and nextHeld: the wall clock at
	// the read plus futureStamp, and less recoveryHold.
	limit, heldLimit uint64

	// wall and mono are the clocks at the previous read; begun reports
	// whether there was one.
	wall  int64 // µs since the Unix epoch
	mono  time.Duration
	begun bool
	// steps counts the backward steps that lowered the query.
	steps int

	// The record: the samples taken, sorted by (stamp, pid), in a ring of
	// len(rec) slots from head. Invariant: every sample taken with a stamp
	// after floor is in it, and the query is never below floor, so a
	// sample the query returns that is not in the record was never taken.
	rec   []taken
	head  int
	n     int
	floor uint64
}

// taken is one sample in the record.
type taken struct {
	ts  uint64
	pid uint32
}

func (a taken) less(b taken) bool { return a.ts < b.ts || a.ts == b.ts && a.pid < b.pid }

const (
	// cursorRecord is the number of samples the record keeps, a power of
	// two.
	cursorRecord = 1024
	// stepTolerance is how far the wall clock may drift from the
	// monotonic one between reads before it counts as a step: more than
	// NTP's slew (at most 500 ppm, 5 ms over 10 s). A false alarm costs
	// a few seconds of samples returned again and found in the record,
	// never a sample.
	stepTolerance = 10 * time.Millisecond
	// futureStamp is how far past the wall clock a sample's stamp may lie
	// and still be on it: the driver and the reader read one clock, not
	// at once. A stamp further ahead was made before a step back.
	futureStamp = 50 * time.Millisecond
	// recoveryHold is how far behind the wall clock the query stays while
	// recovering, so that a sample of the old timeline, taken late, does
	// not lift it above new samples not yet visible: longer than samples
	// are late (about 400 ms).
	recoveryHold = 2 * time.Second
)

// Since starts a read at monotonic time mono (any fixed origin) and wall
// time wall, and returns the lastSeenTimeStamp to pass to
// GetProcessUtilization.
//
// A step back shows as the wall clock advancing less than the monotonic
// one since the previous read, or, on clocks without a monotonic reading,
// as a query ahead of the wall clock. Either lowers the query to the
// previous read's instant on the new wall clock, but never below the
// record's oldest stamp.
func (c *SampleCursor) Since(mono time.Duration, wall time.Time) uint64 {
	// Fold the previous read's takes into the query.
	c.high = max(c.high, c.newest)
	if c.query < c.mark {
		c.query = max(c.query, c.nextHeld)
		if c.query >= c.mark {
			// The new timeline has passed the old one: plain reads again.
			c.query = max(c.query, c.next)
		}
	} else {
		c.query = max(c.query, c.next)
	}

	w := wall.UnixMicro()
	if c.begun {
		el := (mono - c.mono).Microseconds()
		step := w - c.wall - el
		if step < -stepTolerance.Microseconds() || int64(c.query) > w+futureStamp.Microseconds() {
			// The previous read's instant on the wall clock now: no new
			// sample is stamped before it.
			target := w - max(el, 0) - stepTolerance.Microseconds()
			q := max(uint64(max(target, 0)), c.floor)
			if q < c.query {
				c.query = q
				c.mark = max(c.mark, c.high)
				c.steps++
			}
		}
	}
	c.wall, c.mono, c.begun = w, mono, true
	c.limit = uint64(max(w+futureStamp.Microseconds(), 0))
	c.heldLimit = uint64(max(w-recoveryHold.Microseconds(), 0))
	c.next, c.nextHeld, c.newest = c.query, c.query, 0
	return c.query
}

// Take reports whether the sample of pid stamped ts, returned by the
// query Since gave, is new to this cursor, and records it if so.
func (c *SampleCursor) Take(pid uint32, ts uint64) bool {
	if ts <= c.query || ts <= c.floor {
		return false
	}
	// A sample already taken is found where it would be inserted.
	if !c.add(taken{ts: ts, pid: pid}) {
		return false
	}
	c.newest = max(c.newest, ts)
	if ts <= c.limit {
		c.next = max(c.next, ts)
		if ts <= c.heldLimit {
			c.nextHeld = max(c.nextHeld, ts)
		}
	} else {
		// Stamped ahead of the clock: before a step back. Its timeline
		// is the one to pass before recovery ends.
		c.mark = max(c.mark, ts)
	}
	return true
}

// Steps returns the number of backward steps of the wall clock that
// lowered the query (a step shorter than the samples' lag leaves the
// query below the new stamps already, and needs nothing).
func (c *SampleCursor) Steps() int { return c.steps }

// at returns the record's k-th oldest sample. len(c.rec) is a power of
// two.
func (c *SampleCursor) at(k int) *taken { return &c.rec[(c.head+k)&(len(c.rec)-1)] }

// add inserts e into the record in order and reports whether it was new
// to it. A full record drops its oldest sample, or e itself when e is
// older, and raises floor to it.
func (c *SampleCursor) add(e taken) bool {
	if c.rec == nil {
		c.rec = make([]taken, cursorRecord)
	}
	// k is e's place: the first sample not before it. Without a step,
	// samples arrive after the newest, or near it.
	k := c.n
	if k > 0 && !c.at(k-1).less(e) {
		lo, hi := 0, c.n
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if c.at(m).less(e) {
				lo = m + 1
			} else {
				hi = m
			}
		}
		k = lo
		if *c.at(k) == e {
			return false
		}
	}
	if c.n == len(c.rec) {
		if k == 0 {
			c.floor = max(c.floor, e.ts)
			return true
		}
		c.floor = max(c.floor, c.at(0).ts)
		c.head = (c.head + 1) & (len(c.rec) - 1)
		c.n--
		k--
	}
	for j := c.n; j > k; j-- {
		*c.at(j) = *c.at(j - 1)
	}
	*c.at(k) = e
	c.n++
	return true
}
