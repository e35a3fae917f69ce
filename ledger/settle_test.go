package ledger

import "testing"

// TestSettlementFinalize runs the settlement stage's books alone: a
// request finalized is flagged forced exactly where a stalled device's or
// time ring's silence vouched for its end, is split through its end, is
// final, has its tokens retired (later reports are refused and not
// counted), and gives back a grown timeline for reuse.
func TestSettlementFinalize(t *testing.T) {
	tests := []struct {
		name             string
		stall, timeStall int64
		want             uint32
	}{
		{"every device stepped past its end", 1 << 40, 1 << 40, 0},
		{"a device stalled before its end", 50, 1 << 40, FlagForced},
		{"a time ring stalled before its end", 1 << 40, 99, FlagTimeForced},
		{"its end is where the stall began", 100, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b settlement
			r := newAccount(10, nil)
			r.AddOutput(7)
			r.AddInput(3)
			r.st = sampled{endSeen: true, end: 100}
			r.st.pts = make([]point, 3, 8) // grown past the inline points
			b.finalize(r, tt.stall, tt.timeStall)
			if got := r.Flags(); got != tt.want {
				t.Errorf("flags %b, want %b", got, tt.want)
			}
			if !r.Final() || r.through.Load() != 100 || r.st.pts != nil {
				t.Errorf("final %v through %d timeline %v, want final through 100 and no timeline", r.Final(), r.through.Load(), r.st.pts)
			}
			if o, i := b.retiredOut.Load(), b.retiredIn.Load(); o != 7 || i != 3 {
				t.Errorf("retired %d out and %d in, want 7 and 3", o, i)
			}
			if r.AddOutput(1) {
				t.Error("a report after finalize was counted by the ledger")
			}
			if o := b.retiredOut.Load(); o != 7 {
				t.Errorf("retired %d out after a refused report, want 7", o)
			}
			if _, ok := b.reuse(8); ok {
				t.Error("reused a timeline of 8 points for 8: it must have room for more")
			}
			pts, ok := b.reuse(7)
			if !ok || len(pts) != 0 || cap(pts) != 8 {
				t.Errorf("reuse: %d of %d points (ok %v), want the empty timeline of 8", len(pts), cap(pts), ok)
			}
			if _, ok := b.reuse(0); ok {
				t.Error("reused a timeline twice")
			}
		})
	}
}

// TestPrune checks that pruning keeps the newest point split past as the
// anchor of what is not split yet, and nothing older.
func TestPrune(t *testing.T) {
	r := newAccount(0, nil)
	r.st.pts = []point{{t: 0}, {t: 10, out: 1}, {t: 20, out: 2}, {t: 30, out: 3}}
	prune(r, 5)
	if len(r.st.pts) != 4 {
		t.Fatalf("pruned through 5 to %v, want all four points", r.st.pts)
	}
	prune(r, 25)
	if len(r.st.pts) != 2 || r.st.pts[0].t != 20 || r.st.pts[1].t != 30 {
		t.Fatalf("pruned through 25 to %v, want the points at 20 and 30", r.st.pts)
	}
	prune(r, 1<<40)
	if len(r.st.pts) != 1 || r.st.pts[0].t != 30 {
		t.Fatalf("pruned through the end to %v, want the last point alone", r.st.pts)
	}
}
