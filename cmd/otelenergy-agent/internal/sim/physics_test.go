package sim_test

import (
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/sim"
)

// TestDefaultPhysicsPlateaus runs -simulate's processes, alone and
// together, on DefaultPhysics boards and checks each board's power, second
// by second, against a real H100 SXM's: idle 90-130 W with the driver and
// a context; a decoding server on a plateau of about 350-465 W; a trainer
// near 570 W; the two time-sliced in between; never above the 700 W limit.
func TestDefaultPhysicsPlateaus(t *testing.T) {
	script := sim.DefaultScript(8)
	pick := func(pid uint32) sim.Proc {
		for _, p := range script {
			if p.Pid == pid {
				p.Board = 0
				return p
			}
		}
		t.Fatalf("no pid %d in the script", pid)
		return sim.Proc{}
	}
	vllm, trainer := pick(2000), pick(3000)
	// Board 0's server is busy from 6 s (its start) + 3 s to 49 s; the
	// trainer from 10 s.
	tests := []struct {
		name     string
		procs    []sim.Proc
		from, to time.Duration
		lo, hi   float64
	}{
		{"idle", nil, 0, 60 * time.Second, 90, 130},
		{"server, idle between requests", []sim.Proc{vllm}, 6 * time.Second, 9 * time.Second, 90, 130},
		{"server decoding", []sim.Proc{vllm}, 10 * time.Second, 49 * time.Second, 350, 470},
		{"trainer alone", []sim.Proc{trainer}, 11 * time.Second, 70 * time.Second, 530, 610},
		{"server and trainer, time-sliced", []sim.Proc{vllm, trainer}, 11 * time.Second, 49 * time.Second, 440, 580},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			procs := tt.procs
			if procs == nil {
				procs = []sim.Proc{}
			}
			nd, err := sim.NewNode(sim.Config{Boards: 1, Physics: sim.DefaultPhysics, Procs: procs, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			var prev float64
			lo, hi := 1e9, 0.0
			for at := time.Second; at <= tt.to; at += time.Second {
				now = now.Add(time.Second)
				nd.Step()
				e := nd.Board(0).EnergyMJ
				if w := (e - prev) / 1000; at > tt.from {
					lo, hi = min(lo, w), max(hi, w)
					if w > 700 {
						t.Errorf("at %v: %.0f W, above the board's 700 W", at, w)
					}
				}
				prev = e
			}
			t.Logf("%.0f to %.0f W each second from %v to %v (idle %.1f W)", lo, hi, tt.from, tt.to, nd.IdleWatts(0))
			if lo < tt.lo || hi > tt.hi {
				t.Errorf("%.0f to %.0f W, want %.0f to %.0f W", lo, hi, tt.lo, tt.hi)
			}
		})
	}
}
