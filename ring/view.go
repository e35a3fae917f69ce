package ring

// View is a read-only view of a [Ring]: it answers every query and cannot
// push, so handing one out never breaks the ring's single-writer rule. The
// zero View is empty. Views are safe for concurrent use.
type View struct{ r *Ring }

// View returns a read-only view of r.
func (r *Ring) View() View { return View{r} }

// Len returns the number of points readers can see, as [Ring.Len].
func (v View) Len() int {
	if v.r == nil {
		return 0
	}
	return v.r.Len()
}

// Back returns the point k pushes before the newest, as [Ring.Back].
func (v View) Back(k int) (Point, bool) {
	if v.r == nil {
		return Point{}, false
	}
	return v.r.Back(k)
}

// AtOrBefore returns the newest point at or before t, as [Ring.AtOrBefore].
func (v View) AtOrBefore(t int64) (Point, bool) {
	if v.r == nil {
		return Point{}, false
	}
	return v.r.AtOrBefore(t)
}

// Window returns the window [start, end], as [Ring.Window].
func (v View) Window(start, end int64) (Window, bool) {
	if v.r == nil {
		return Window{}, false
	}
	return v.r.Window(start, end)
}

// At returns logical point j, as [Ring.At].
func (v View) At(j uint64) (Point, bool) {
	if v.r == nil {
		return Point{}, false
	}
	return v.r.At(j)
}

// Oldest returns the logical index of the oldest point readers can see,
// as [Ring.Oldest].
func (v View) Oldest() uint64 {
	if v.r == nil {
		return 0
	}
	return v.r.Oldest()
}
