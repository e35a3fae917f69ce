package nvmlsource

// NewCursorOf returns a cursor whose record keeps n samples, a power of
// two, so that a test reaches a full record with few samples.
func NewCursorOf(n int) *SampleCursor { return &SampleCursor{rec: make([]taken, n)} }

// Recorded reports whether c's record holds pid's sample stamped ts, and
// returns the record's floor: every sample taken with a stamp after it is
// recorded.
func (c *SampleCursor) Recorded(pid uint32, ts uint64) (bool, uint64) { return c.has(pid, ts), c.floor }

// has reports whether the record holds pid's sample stamped ts: a plain
// scan, the reference for the record's binary search.
func (c *SampleCursor) has(pid uint32, ts uint64) bool {
	e := taken{ts: ts, pid: pid}
	for k := range c.n {
		if *c.at(k) == e {
			return true
		}
	}
	return false
}
