package sim

import (
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
)

// TestReadWallStep: over BenchmarkAgentSplit's node with the wall clock
// stepped 3 s back at 60 s, read once a second as the agent reads, Read
// takes every sample the driver made once: none hidden under the old
// timeline's stamps, none of the old timeline taken again. Without the
// step back, it is what every Read takes.
func TestReadWallStep(t *testing.T) {
	for _, step := range []time.Duration{0, -3*time.Second - 417*time.Microsecond, 2 * time.Second} {
		now := time.Unix(1_700_000_000, 0)
		ph := Physics{IdleWatts: 70, SMWatts: 4, SamplePeriod: time.Second / 6, SampleLag: 400 * time.Millisecond,
			WallStep: step, WallStepAt: 60 * time.Second}
		const span = 100 * time.Second
		var procs []Proc
		procs = append(procs, BusyFrom10s(0, span, 1)...)
		procs = append(procs, NeverIdle(1, span, 1)...)
		procs = append(procs, Churn(2, span, 1)...)
		nd, err := NewNode(Config{Boards: 3, Physics: ph, Procs: procs, Now: func() time.Time { return now }, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		type key struct {
			board int
			pid   uint32
			ts    uint64
		}
		made := map[key]time.Duration{} // when each became visible
		took := map[key]int{}
		var bp nvmlsource.BoardProcesses
		const tick = 10 * time.Millisecond
		var last time.Duration
		for at := tick; at <= span+5*time.Second; at += tick {
			now = now.Add(tick)
			nd.Step()
			for b := range nd.boards {
				for _, ps := range nd.boards[b].samples {
					k := key{b, ps.s.Pid, ps.s.TimeStamp}
					if _, ok := made[k]; !ok {
						made[k] = ps.visible
					}
				}
			}
			if at%time.Second == 0 {
				last = at
				for b := range nd.boards {
					if err := nd.Read(b, &bp); err != nil {
						t.Fatal(err)
					}
					for _, s := range bp.Samples {
						took[key{b, s.Pid, s.TimeStamp}]++
					}
				}
			}
		}
		lost := 0
		for k, visible := range made {
			switch n := took[k]; {
			case n == 0 && visible <= last:
				lost++
			case n > 1:
				t.Errorf("step %v: sample %+v taken %d times", step, k, n)
			}
		}
		if lost > 0 {
			t.Errorf("step %v: %d of %d samples lost", step, lost, len(made))
		}
		t.Logf("step %v: %d samples, made", step, len(made))
	}
}
