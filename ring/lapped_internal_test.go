package ring

import "testing"

// TestBackRejectsLappedRead replays, step by step, a reader that the
// writer overtakes between its two loads of written: the reader sees the
// ring with the oldest point live, then the writer pushes one point and
// starts overwriting the oldest slot (it has stored the new time, not yet
// the energy or the tokens, and not yet published that push). The point the
// reader then loads is torn, and validation must reject it. Once the
// overwrite is published the slot's index is no longer live, and a fresh
// reader sees only whole points.
func TestBackRejectsLappedRead(t *testing.T) {
	r, err := New(8) // 8 slots, 7 points visible
	if err != nil {
		t.Fatal(err)
	}
	pt := func(i int64) Point { return Point{T: i * 100, EnergyMJ: uint64(i) * 1000, Tokens: uint64(i) * 10} }
	for i := range int64(7) {
		if err := r.Push(pt(i)); err != nil {
			t.Fatal(err)
		}
	}
	hi := r.written.Load() // the reader's first load: 7 points, index 0 live
	const oldest = 6       // Back(6) is index 0, in slot 0
	if p, ok := r.backFrom(oldest, hi); !ok || p != pt(0) {
		t.Fatalf("untouched ring: backFrom = %+v, %v; want %+v", p, ok, pt(0))
	}

	// The writer runs: it pushes index 7 (slot 7) and starts pushing
	// index 8 = 0 + Cap(), into slot 0: the time is stored, the rest is
	// not, and written says 8. From written alone the reader cannot tell
	// how far that push got, so the point it loads is torn and must be
	// rejected; its retry reloads written and finds the oldest whole
	// point now live, index 1.
	if err := r.Push(pt(7)); err != nil {
		t.Fatal(err)
	}
	next := pt(8)
	r.t[8&r.mask].Store(next.T)
	if p, ok := r.backFrom(oldest, hi); !ok || p != pt(1) {
		t.Fatalf("reader overtaken mid-write: backFrom = %+v, %v; want the torn point rejected and the retry's %+v", p, ok, pt(1))
	}

	// The writer finishes; Back, which reloads written, never returns a
	// point that is not one of those pushed.
	r.e[8&r.mask].Store(next.EnergyMJ)
	r.k[8&r.mask].Store(next.Tokens)
	r.written.Store(9)
	r.lastT = next.T
	for k := range r.Len() {
		p, ok := r.Back(k)
		if want := pt(int64(8 - k)); !ok || p != want {
			t.Fatalf("Back(%d) = %+v, %v; want %+v", k, p, ok, want)
		}
	}
	if p, ok := r.backFrom(oldest, hi); !ok || p != pt(2) {
		t.Fatalf("reader lapped by a whole point: backFrom = %+v, %v; want the retry's %+v", p, ok, pt(2))
	}
}

// TestAtOrBeforeRejectsLappedRead replays a search overtaken the same way:
// the reader saw index 0 live, the writer has pushed index 7 and stored
// only the time of index 8 into slot 0, and the search for the oldest
// point reads that slot. The torn point must be rejected; the retry steps
// away from the oldest end and answers with a whole point.
func TestAtOrBeforeRejectsLappedRead(t *testing.T) {
	r, err := New(8)
	if err != nil {
		t.Fatal(err)
	}
	pt := func(i int64) Point { return Point{T: i * 100, EnergyMJ: uint64(i) * 1000, Tokens: uint64(i) * 10} }
	for i := range int64(7) {
		if err := r.Push(pt(i)); err != nil {
			t.Fatal(err)
		}
	}
	hi := r.written.Load()
	if j, p, ok := r.atOrBefore(50, hi); !ok || j != 0 || p != pt(0) {
		t.Fatalf("untouched ring: atOrBefore(50) = %d, %+v, %v; want index 0, %+v", j, p, ok, pt(0))
	}
	if err := r.Push(pt(7)); err != nil {
		t.Fatal(err)
	}
	r.t[8&r.mask].Store(pt(8).T)
	j, p, ok := r.atOrBefore(50, hi)
	if !ok || p.EnergyMJ != uint64(p.T)*10 || p.Tokens != uint64(p.T)/10 {
		t.Fatalf("reader overtaken mid-write: atOrBefore(50) = %d, %+v, %v; want a whole point", j, p, ok)
	}
	// The retry's guard skips the three oldest live points, 1 to 3.
	if j != 4 || p != pt(4) {
		t.Fatalf("reader overtaken mid-write: atOrBefore(50) = %d, %+v; want the retry's index 4, %+v", j, p, pt(4))
	}
}
