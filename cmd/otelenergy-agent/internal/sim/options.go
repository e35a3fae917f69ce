package sim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrBadOption reports an option [ParseOptions] cannot read.
var ErrBadOption = errors.New("sim: bad option")

// MemoryBoundPhysics are the bench's memory-bound physics: 1.5 W per
// percent of SM and 3 W per percent of memory utilization, so that
// memory-bound work draws far more per percent of SM than compute-bound
// work.
var MemoryBoundPhysics = Physics{IdleWatts: 70, SMWatts: 1.5, MemWatts: 3, SamplePeriod: time.Second / 6, CounterPeriod: 100 * time.Millisecond, Tick: 10 * time.Millisecond}

// benchSpan is how long the bench script runs under -simulate.
const benchSpan = time.Hour

// ParseOptions reads -simulate's knobs into a Config for n boards: a
// comma-separated list of key=value, any of
//
//	physics=sm|membound   DefaultPhysics, or MemoryBoundPhysics
//	idle=70               IdleWatts
//	noise=3               NoiseWatts
//	lag=400ms             SampleLag
//	sample-period=1s      SamplePeriod
//	counter-period=20ms   CounterPeriod
//	script=default|bench  DefaultScript, or the bench's boards in turn
//	                      (BusyFrom10s, NeverIdle, Churn) for an hour
//	seed=1                the bench script's seed
//
// An empty s is the default node. Errors wrap [ErrBadOption].
func ParseOptions(s string, n int) (Config, error) {
	cfg := Config{Boards: n, Physics: DefaultPhysics}
	bench := false
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Config{}, fmt.Errorf("%w: %q is not key=value", ErrBadOption, kv)
		}
		var err error
		dur := func(d *time.Duration) {
			*d, err = time.ParseDuration(v)
			if err == nil && *d < 0 {
				err = errors.New("negative")
			}
		}
		num := func(f *float64) {
			*f, err = strconv.ParseFloat(v, 64)
			if err == nil && !(*f >= 0) {
				err = errors.New("negative")
			}
		}
		switch k {
		case "physics":
			switch v {
			case "sm":
				cfg.Physics = DefaultPhysics
			case "membound":
				cfg.Physics = MemoryBoundPhysics
			default:
				err = errors.New("want sm or membound")
			}
		case "idle":
			num(&cfg.Physics.IdleWatts)
		case "noise":
			num(&cfg.Physics.NoiseWatts)
		case "lag":
			dur(&cfg.Physics.SampleLag)
		case "sample-period":
			dur(&cfg.Physics.SamplePeriod)
		case "counter-period":
			dur(&cfg.Physics.CounterPeriod)
		case "script":
			switch v {
			case "default":
				bench = false
			case "bench":
				bench = true
			default:
				err = errors.New("want default or bench")
			}
		case "seed":
			cfg.Seed, err = strconv.ParseUint(v, 10, 64)
		default:
			err = errors.New("unknown key")
		}
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s: %v", ErrBadOption, kv, err)
		}
	}
	if bench {
		for b := range n {
			switch b % 3 {
			case 0:
				cfg.Procs = append(cfg.Procs, BusyFrom10s(b, benchSpan, cfg.Seed)...)
			case 1:
				cfg.Procs = append(cfg.Procs, NeverIdle(b, benchSpan, cfg.Seed)...)
			default:
				cfg.Procs = append(cfg.Procs, Churn(b, benchSpan, cfg.Seed)...)
			}
		}
		cfg.MIG = []int{}
	}
	return cfg, nil
}
