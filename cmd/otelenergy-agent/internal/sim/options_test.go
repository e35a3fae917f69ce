package sim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/sim"
)

func TestParseOptions(t *testing.T) {
	cfg, err := sim.ParseOptions("physics=membound, lag=400ms,sample-period=1s,counter-period=20ms,noise=3,idle=110,script=bench,seed=7", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := sim.MemoryBoundPhysics
	want.SampleLag, want.SamplePeriod, want.CounterPeriod, want.NoiseWatts, want.IdleWatts = 400*time.Millisecond, time.Second, 20*time.Millisecond, 3, 110
	if cfg.Physics != want || cfg.Boards != 3 || cfg.Seed != 7 || len(cfg.Procs) == 0 {
		t.Fatalf("got %+v (%d procs)", cfg.Physics, len(cfg.Procs))
	}
	if _, err := sim.NewNode(cfg); err != nil {
		t.Fatal(err)
	}
	if cfg, err := sim.ParseOptions("", 8); err != nil || cfg.Physics != sim.DefaultPhysics || cfg.Procs != nil {
		t.Fatalf("empty options: %+v, %v", cfg, err)
	}
	for _, bad := range []string{"lag", "lag=soon", "physics=quantum", "lag=-1s", "idle=-5", "script=x", "colour=red"} {
		if _, err := sim.ParseOptions(bad, 1); !errors.Is(err, sim.ErrBadOption) {
			t.Errorf("ParseOptions(%q) = %v, want ErrBadOption", bad, err)
		}
	}
}
