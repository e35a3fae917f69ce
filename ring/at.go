package ring

// At returns the point with logical index j, counting every point ever
// pushed from 0. It returns false when j has not been pushed yet or has
// already been overwritten; [Ring.Oldest] then says where the ring starts.
// It is safe for concurrent use with Push.
func (r *Ring) At(j uint64) (Point, bool) {
	lo, hi := r.live(r.written.Load())
	if j < lo || j >= hi {
		return Point{}, false
	}
	p := r.load(j)
	if !r.valid(j, r.written.Load()) {
		return Point{}, false
	}
	return p, true
}

// Oldest returns the logical index of the oldest point readers can see.
func (r *Ring) Oldest() uint64 {
	lo, _ := r.live(r.written.Load())
	return lo
}
