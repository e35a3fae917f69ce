package ledger

import (
	"math"
	"testing"
)

// TestStampedFirstReportPlacesThePrefill: a first report stamped where it
// was made places the request's first token at the stamp, whatever the
// read that saw it and however many tokens that read found; the same
// reports unstamped are placed only to within the read.
func TestStampedFirstReportPlacesThePrefill(t *testing.T) {
	// Reads every 20 ms; the first token at 303 ms, then one every 7 ms,
	// so the read at 320 ms sees three.
	const first, step = 303e6, 7e6
	run := func(stamp bool) int64 {
		g, r := adoptedAtZero(t, 500)
		next := int64(first)
		for t0 := int64(0); t0 <= 500e6; t0 += 20e6 {
			for ; next <= t0; next += step {
				if _, _, isFirst := r.AddFirstOutput(1); isFirst && stamp {
					r.StampFirstOutput(next, 1)
				}
			}
			g.l.Observe(t0, 0, 0)
		}
		ft, ok := r.FirstToken()
		if !ok {
			t.Fatal("no first token placed")
		}
		return ft
	}
	if got := run(true); math.Abs(float64(got-first)) > 0.5e6 {
		t.Errorf("stamped: first token at %.2f ms, want %.0f ms", float64(got)/1e6, first/1e6)
	}
	// The control: what the stamp corrects.
	if got := run(false); math.Abs(float64(got-first)) < 2e6 {
		t.Errorf("unstamped: first token at %.2f ms, within 2 ms of %.0f ms: the read alone placed it as well as the stamp", float64(got)/1e6, first/1e6)
	}
}

// TestStampedChunkPlacesItsTokens: a first report of a chunk, stamped,
// puts the chunk's tokens at the stamp, not at the middle of the read.
func TestStampedChunkPlacesItsTokens(t *testing.T) {
	g, r := adoptedAtZero(t, 100)
	if _, _, isFirst := r.AddFirstOutput(16); !isFirst {
		t.Fatal("the first report was not found first")
	}
	r.StampFirstOutput(141e6, 16)
	if _, _, isFirst := r.AddFirstOutput(16); isFirst {
		t.Fatal("the second report was found first")
	}
	g.l.Observe(160e6, 0, 0) // sees both reports
	pts := r.st.pts
	if len(pts) != 3 || pts[1].t != 141e6 || pts[1].out != 16 || pts[2].out != 32 || pts[2].t < 141e6 {
		t.Fatalf("timeline %+v, want the start, 16 tokens at 141 ms, then 32 tokens after", pts)
	}
}

// TestStampedChunkIsPlacedAtItsStamp: a later report of more than one
// token, stamped, is placed at its stamp when the stamp's total is what
// the read saw; when more came after it, or the stamp is older than the
// read's news, the read places the reports as before.
func TestStampedChunkIsPlacedAtItsStamp(t *testing.T) {
	g, r := adoptedAtZero(t, 100)
	chunk := func(n uint64, at int64) {
		total, _, first := r.AddFirstOutput(n)
		if first {
			r.StampFirstOutput(at, n)
		}
		r.StampChunk(at, total)
	}
	chunk(16, 141e6)
	g.l.Observe(160e6, 0, 0)
	chunk(16, 171e6)
	g.l.Observe(200e6, 0, 0) // the read's middle is 180 ms
	if p := r.st.last(); p.out != 32 || p.t != 171e6 {
		t.Fatalf("second chunk at %.1f ms with %d tokens, want 32 tokens at its stamp, 171 ms", float64(p.t)/1e6, p.out)
	}
	// A token reported after the stamped chunk: the stamp is not what
	// the read saw, so the read places them.
	chunk(16, 205e6)
	r.AddOutput(1)
	g.l.Observe(240e6, 0, 0)
	if p := r.st.last(); p.out != 49 || p.t != 220e6 {
		t.Fatalf("a chunk and a token after it at %.1f ms with %d tokens, want 49 at the read's middle, 220 ms", float64(p.t)/1e6, p.out)
	}
	// A stamp the read has already placed moves nothing later.
	r.AddOutput(1)
	g.l.Observe(280e6, 0, 0)
	if p := r.st.last(); p.out != 50 || p.t != 260e6 {
		t.Fatalf("a token after an old stamp at %.1f ms with %d tokens, want 50 at the read's middle, 260 ms", float64(p.t)/1e6, p.out)
	}
}

// TestStampFirstOutputLimits: a stamp, of a first report or of a chunk,
// keeps its time since the start to the nanosecond and its count exactly,
// and one that does not fit its bits is not recorded rather than recorded
// wrong.
func TestStampFirstOutputLimits(t *testing.T) {
	const start = 5e9
	for _, c := range []struct {
		t     int64
		n     uint64
		ok    bool
		wantT int64
	}{
		{start, 1, true, start},
		{start + 123_456_789, 1 << stampCountBits, true, start + 123_456_789},
		{start - 10, 3, true, start}, // a clock behind the start: at the start
		{start + 1<<stampTimeBits - 2, 7, true, start + 1<<stampTimeBits - 2},
		{start + 1<<stampTimeBits - 1, 7, false, 0},
		{start + 1e6, 1<<stampCountBits + 1, false, 0},
		{start + 1e6, 0, false, 0},
	} {
		r := newAccount(start, nil)
		r.StampFirstOutput(c.t, c.n)
		r.StampChunk(c.t, c.n)
		for _, got := range []struct {
			name string
			t    int64
			n    uint64
		}{{"first", 0, 0}, {"chunk", 0, 0}} {
			if got.name == "first" {
				got.t, got.n = r.firstOutput()
			} else {
				got.t, got.n = r.chunkReport()
			}
			if !c.ok {
				if got.n != 0 {
					t.Errorf("%s stamp(%d, %d) recorded (%d, %d), want nothing", got.name, c.t, c.n, got.t, got.n)
				}
				continue
			}
			if got.t != c.wantT || got.n != c.n {
				t.Errorf("%s stamp(%d, %d) = (%d, %d), want (%d, %d)", got.name, c.t, c.n, got.t, got.n, c.wantT, c.n)
			}
		}
	}
}

// TestReportSeenWithTheEndIsPlacedAtIt: End follows a request's last
// report, so reports first seen at the same read as the end are placed at
// the end, not at the middle of the read.
func TestReportSeenWithTheEndIsPlacedAtIt(t *testing.T) {
	g, r := adoptedAtZero(t, 100)
	r.AddOutput(16)
	g.l.Observe(160e6, 0, 0)
	g.l.Observe(180e6, 0, 0)
	r.AddOutput(5)
	g.l.End(r, 197e6)
	g.l.Observe(200e6, 0, 0) // the read's middle is 190 ms
	if last := r.st.last(); last.out != 21 || last.t != 197e6 {
		t.Errorf("the last report placed at %+v, want 21 tokens at the end, 197 ms", last)
	}
}

// adoptedAtZero returns a ledger with one request, started at 0, adopted
// by a read at 0 and with a prompt of in tokens reported after it.
func adoptedAtZero(t *testing.T, in uint64) (*rig, *Account) {
	g := newRig(t, Config{Horizon: 10e9})
	r := newAccount(0, nil)
	g.l.Add(r)
	g.l.Observe(0, 0, 0)
	r.AddInput(in)
	return g, r
}
