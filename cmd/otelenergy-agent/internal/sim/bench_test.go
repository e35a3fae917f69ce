package sim_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/sim"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// splitScenario is one physics over a node of three boards: one idle for
// its first 10 s then busy, one never idle, one running a steady job and a
// churn of 2-4 s jobs with idle gaps.
type splitScenario struct {
	name string
	ph   sim.Physics
	// draw scales each process's draw by its kind, as sim.Proc.Draw:
	// memory-bound work (memory utilization near its SM's) draws 0.6× the
	// Physics per percent, compute-bound work 1.2×.
	draw bool
	// hidden scales each process's draw by a factor of its own, 0.7× to
	// 1.3×, drawn from its pid: what no utilization shows.
	hidden bool
}

var splitScenarios = []splitScenario{
	// Power follows SM utilization; samples visible at their timestamps.
	{name: "sm", ph: sim.Physics{IdleWatts: 70, SMWatts: 4, NoiseWatts: 3, SamplePeriod: time.Second / 6}},
	// The same, with samples visible 400 ms after their timestamps.
	{name: "sm-late", ph: sim.Physics{IdleWatts: 70, SMWatts: 4, NoiseWatts: 3, SamplePeriod: time.Second / 6, SampleLag: 400 * time.Millisecond}},
	// Memory-bound work draws more per percent of SM than compute-bound
	// work; samples late, once a second.
	{name: "membound-late", ph: sim.Physics{IdleWatts: 70, SMWatts: 1.5, MemWatts: 3, NoiseWatts: 3, SamplePeriod: time.Second, SampleLag: 400 * time.Millisecond}},
	// The same with samples every 1/6 s and a higher idle.
	{name: "membound-fast", ph: sim.Physics{IdleWatts: 110, SMWatts: 1.5, MemWatts: 3, NoiseWatts: 3, SamplePeriod: time.Second / 6, SampleLag: 400 * time.Millisecond}},

	// Held-out physics: the model's linear structure does not share
	// them.
	//
	// Each process draws per percent of SM by its kind (decode 0.6×,
	// training 1.2×), which no utilization shows; memory-bound work
	// draws less, which non-negative coefficients cannot represent.
	{name: "held-draw", ph: sim.Physics{IdleWatts: 70, SMWatts: 4, NoiseWatts: 3, SamplePeriod: time.Second / 6, SampleLag: 400 * time.Millisecond}, draw: true},
	// Each process draws per percent of SM by a factor of its own, 0.7×
	// to 1.3×, whatever its kind.
	{name: "held-hidden", ph: sim.Physics{IdleWatts: 70, SMWatts: 4, NoiseWatts: 3, SamplePeriod: time.Second / 6, SampleLag: 400 * time.Millisecond}, hidden: true},
	// Power saturates: idle + 400 W·(1 − exp(−ΣSM/60)).
	{name: "held-saturating", ph: sim.Physics{IdleWatts: 70, SMWatts: 4, SatWatts: 400, SatSM: 60, NoiseWatts: 3, SamplePeriod: time.Second / 6, SampleLag: 400 * time.Millisecond}},
	// Each process sampled at an instant of its own, its stamp 0-50 µs
	// late.
	{name: "held-instants", ph: sim.Physics{IdleWatts: 70, SMWatts: 4, NoiseWatts: 3, SamplePeriod: time.Second / 6, SampleLag: 400 * time.Millisecond, PerPidInstants: true, StampJitter: 50 * time.Microsecond}},
	// The wall clock steps 3 s back at 60 s. A clock set at an arbitrary
	// instant steps by an arbitrary amount: by a whole 3 s on the
	// simulator's 1 ms grid, every new sample would carry an old one's pid
	// and µs stamp, which no reader can tell apart.
	{name: "held-wallstep", ph: sim.Physics{IdleWatts: 70, SMWatts: 4, NoiseWatts: 3, SamplePeriod: time.Second / 6, SampleLag: 400 * time.Millisecond, WallStep: -3*time.Second - 417*time.Microsecond, WallStepAt: 60 * time.Second}},
}

// steppedRings is the Monitor's rings with its wall clock stepped as the
// simulator's: a real Monitor's ring time is monotonic while its wall
// clock steps; a fake clock cannot be both.
type steppedRings struct {
	agent.ClockedRings
	nd *sim.Node
}

func (r steppedRings) Clock() (int64, time.Time) {
	ring, wall := r.ClockedRings.Clock()
	return ring, r.nd.WallClock(wall)
}

// splitFigures are one scenario's figures.
type splitFigures struct {
	errs                             []float64 // per process, signed, %
	mean, p90, worst, energyWeighted float64   // of |errs|, %
	idleErr                          float64   // the worst board's |learned − true| idle, %
	unattributed                     float64   // % of the boards' energy
	violations                       int       // passes whose parts did not sum to hw.energy
	procs                            []string
}

const splitSpan = 150 * time.Second

// runSplit runs the agent over the scenario's node on a fake clock: the
// library's sampler every 20 ms, a pass every second, for splitSpan and 10
// s of idle after, so that every held interval is split.
func runSplit(tb testing.TB, sc splitScenario, seed uint64) splitFigures {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	var procs []sim.Proc
	procs = append(procs, sim.BusyFrom10s(0, splitSpan, seed)...)
	procs = append(procs, sim.NeverIdle(1, splitSpan, seed)...)
	procs = append(procs, sim.Churn(2, splitSpan, seed)...)
	if sc.draw {
		for k := range procs {
			procs[k].Draw = 1.2
			if lv := procs[k].Levels; len(lv) > 0 && lv[0].Mem > 0.5*lv[0].SM {
				procs[k].Draw = 0.6
			}
		}
	}
	if sc.hidden {
		for k := range procs {
			procs[k].Draw = 0.7 + 0.6*float64(procs[k].Pid*2654435761%1000)/999
		}
	}
	nd, err := sim.NewNode(sim.Config{Boards: 3, Physics: sc.ph, Procs: procs, Now: clock, Seed: seed})
	if err != nil {
		tb.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	mon, rings, err := agent.NewMonitor(nd, otelenergy.WithClock(clock), otelenergy.WithMeterProvider(mp))
	if err != nil {
		tb.Fatal(err)
	}
	defer mon.Shutdown(context.Background())
	ag, err := agent.New(agent.Config{Rings: steppedRings{rings, nd}, Lister: nd, Resolver: nd, MeterProvider: mp,
		Now: func() time.Time { return nd.WallClock(now) }})
	if err != nil {
		tb.Fatal(err)
	}
	defer ag.Shutdown()

	var f splitFigures
	const tick = 10 * time.Millisecond
	end := splitSpan + 10*time.Second
	for i := 1; time.Duration(i)*tick <= end; i++ {
		now = now.Add(tick)
		nd.Step()
		if i%2 == 0 {
			mon.Sample()
		}
		if i%100 == 0 {
			ag.Pass()
			for b := range 3 {
				t := ag.Totals(b)
				var sum uint64
				for _, mj := range t.Processes {
					sum += mj
				}
				if sum+t.IdleMJ+t.UnattributedMJ+t.ExitedMJ+t.OverflowMJ != t.EnergyMJ {
					f.violations++
				}
			}
		}
	}
	var absSum, truthSum float64
	for _, p := range nd.Procs() {
		truth, _ := nd.TruthMJ(p.Pid)
		if truth <= 0 {
			continue
		}
		start, _ := nd.StartTicks(p.Pid)
		got := float64(ag.Totals(p.Board).Processes[agent.Process{Pid: p.Pid, StartTime: start}])
		e := (got - truth) / truth * 100
		f.errs = append(f.errs, e)
		f.procs = append(f.procs, fmt.Sprintf("board %d %s pid %d: %.1f J, truth %.1f J (%+.1f%%)", p.Board, p.Name, p.Pid, got/1000, truth/1000, e))
		absSum += math.Abs(got - truth)
		truthSum += truth
	}
	abs := make([]float64, len(f.errs))
	for i, e := range f.errs {
		abs[i] = math.Abs(e)
		f.mean += abs[i] / float64(len(abs))
	}
	slices.Sort(abs)
	f.p90 = abs[int(math.Ceil(0.9*float64(len(abs))))-1]
	f.worst = abs[len(abs)-1]
	f.energyWeighted = absSum / truthSum * 100
	var unat, energy float64
	for b := range 3 {
		t := ag.Totals(b)
		unat += float64(t.UnattributedMJ)
		energy += float64(t.EnergyMJ)
		f.procs = append(f.procs, fmt.Sprintf("board %d: idle %.1f W, model %.1f learned %v; energy %d idle %d unattributed %d exited %d overflow %d truth %.0f", b, t.IdleWatts, t.Model, t.ModelLearned, t.EnergyMJ, t.IdleMJ, t.UnattributedMJ, t.ExitedMJ, t.OverflowMJ, nd.Board(b).EnergyMJ))
		f.idleErr = max(f.idleErr, math.Abs(t.IdleWatts-sc.ph.IdleWatts)/sc.ph.IdleWatts*100)
	}
	f.unattributed = unat / energy * 100
	return f
}

// BenchmarkAgentSplit runs the agent over simulated nodes whose physics
// differ from the split's rule (see splitScenarios) and reports, per
// scenario, each process's error against the energy it drew above idle:
// err%-mean, err%-p90, err%-worst and err%-eweighted (Σ|error| / Σ truth);
// idle%-err, the worst board's learned idle power against the truth;
// unattr%, the unattributed energy as a share of the boards' (the truth
// is 0: every watt above idle had an owner); and conservation-violations,
// the passes after which a board's parts did not sum to its hw.energy. With
// OTELENERGY_AGENT_ACC_OUT set to a path, it writes every process's signed
// error there (scenario, error %), which tools/accplot -agent draws.
func BenchmarkAgentSplit(b *testing.B) {
	var out []string
	for _, sc := range splitScenarios {
		b.Run(sc.name, func(b *testing.B) {
			b.ReportAllocs()
			var f splitFigures
			for b.Loop() {
				f = runSplit(b, sc, 1)
			}
			b.ReportMetric(f.mean, "err%-mean")
			b.ReportMetric(f.p90, "err%-p90")
			b.ReportMetric(f.worst, "err%-worst")
			b.ReportMetric(f.energyWeighted, "err%-eweighted")
			b.ReportMetric(f.idleErr, "idle%-err")
			b.ReportMetric(f.unattributed, "unattr%")
			b.ReportMetric(float64(f.violations), "conservation-violations")
			if testing.Verbose() {
				b.Log(strings.Join(f.procs, "\n"))
			}
			for _, e := range f.errs {
				out = append(out, fmt.Sprintf("%s\t%.4f", sc.name, e))
			}
		})
	}
	if path := os.Getenv("OTELENERGY_AGENT_ACC_OUT"); path != "" && len(out) > 0 {
		data := "scenario\terr_pct\n" + strings.Join(out, "\n") + "\n"
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAgentSplitTargets holds the split to issue 25's targets on seeds
// the benchmark does not use, and on a board whose counter steps every
// 20 ms (V100) with samples once a second: power that follows SM, mean
// error ≤ 2 % and p90 ≤ 5 %; memory-bound work drawing more or less per
// percent of SM than compute-bound work, mean and energy-weighted error
// ≤ 5 %; learned idle within 5 %; unattributed ≤ 0.5 % of the
// boards' energy; conservation after every pass.
func TestAgentSplitTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates minutes")
	}
	v100 := func(ph sim.Physics) sim.Physics {
		ph.CounterPeriod, ph.SamplePeriod = 20*time.Millisecond, time.Second
		return ph
	}
	for _, tc := range []struct {
		sc       splitScenario
		membound bool
	}{
		{splitScenarios[1], false},
		{splitScenario{name: "sm-late-v100", ph: v100(splitScenarios[1].ph)}, false},
		{splitScenarios[2], true},
		{splitScenario{name: "membound-late-v100", ph: v100(splitScenarios[2].ph)}, true},
		// Memory-bound work drawing less per percent of SM than
		// compute-bound work, as the harness's memory-bound physics.
		{splitScenarios[4], true},
	} {
		for _, seed := range []uint64{2, 3} {
			t.Run(fmt.Sprintf("%s/seed%d", tc.sc.name, seed), func(t *testing.T) {
				f := runSplit(t, tc.sc, seed)
				t.Logf("mean %.2f%% p90 %.2f%% worst %.2f%% energy-weighted %.2f%% idle %.2f%% unattributed %.3f%%",
					f.mean, f.p90, f.worst, f.energyWeighted, f.idleErr, f.unattributed)
				if tc.membound {
					if f.mean > 5 || f.energyWeighted > 5 {
						t.Errorf("memory-bound: mean %.2f%%, energy-weighted %.2f%%; targets 5%% and 5%%", f.mean, f.energyWeighted)
					}
				} else if f.mean > 2 || f.p90 > 5 {
					t.Errorf("power by SM: mean %.2f%%, p90 %.2f%%; targets 2%% and 5%%", f.mean, f.p90)
				}
				if f.idleErr > 5 || f.unattributed > 0.5 || f.violations > 0 {
					t.Errorf("idle %.2f%% off, unattributed %.3f%%, %d conservation violations", f.idleErr, f.unattributed, f.violations)
				}
			})
		}
	}
}
