package agent_test

import (
	"context"
	"math"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
)

// clockRings is fakeRings with a Monitor's Clock: its ring time is
// monotonic, its wall clock may step.
type clockRings struct {
	*fakeRings
	base time.Time
	step time.Duration // the wall clock's step so far
}

func (c *clockRings) wall() time.Time { return c.base.Add(time.Duration(c.t) + c.step) }

func (c *clockRings) Clock() (int64, time.Time) { return c.t, c.wall() }

// twoProcs lists pids 1 and 2 and the samples given it.
type twoProcs struct {
	on      bool
	samples []nvmlsource.Sample
}

func (l *twoProcs) Read(_ int, b *nvmlsource.BoardProcesses) error {
	b.Reset()
	if !l.on {
		return nil
	}
	b.Processes = append(b.Processes, nvmlsource.ProcessUsage{Pid: 1, Listed: true}, nvmlsource.ProcessUsage{Pid: 2, Listed: true})
	b.Samples = append(b.Samples, l.samples...)
	l.samples = l.samples[:0]
	return nil
}

// TestWallClockStep: after 5 s idle, two processes take turns every 700 ms (80 % and
// 40 % SM, 4 W per percent, 70 W idle), their samples stamped on the
// wall clock every 200 ms and listed 400 ms late. At 20 s the wall clock
// steps, 3 s back in one run and 500 ms ahead in the other, as NTP may
// step it. The ring's time does not step, and neither may the split:
// each process's total stays within 2 % of its truth, with under 0.5 % of
// the energy unattributed. Config.Now is the stepping wall clock, as a
// harness would pass it: a Rings with a Clock must make it moot.
func TestWallClockStep(t *testing.T) {
	for _, step := range []time.Duration{0, -3 * time.Second, 500 * time.Millisecond} {
		rings := &clockRings{fakeRings: newFakeRings(t), base: time.Unix(1_700_000_000, 0)}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		lister := &twoProcs{}
		ag, err := agent.New(agent.Config{Rings: rings, Lister: lister, Resolver: anyProc{}, MeterProvider: mp,
			Now: rings.wall})
		if err != nil {
			t.Fatal(err)
		}
		var truth [2]float64
		type pend struct {
			s  nvmlsource.Sample
			at int64
		}
		var queue []pend
		for k := 1; k <= 600; k++ { // 100 ms steps
			at := time.Duration(k) * 100 * time.Millisecond
			if at == 20*time.Second {
				rings.step = step
			}
			u := [2]uint32{80, 0}
			if (at-100*time.Millisecond)/(700*time.Millisecond)%2 == 1 {
				u = [2]uint32{0, 40}
			}
			if at <= 5*time.Second || at > 58*time.Second {
				u = [2]uint32{} // idle, at first with no process listed
			}
			lister.on = at > 5*time.Second
			rings.push(7_000 + 400*uint64(u[0]+u[1]))
			for p := range 2 {
				truth[p] += 400 * float64(u[p])
			}
			if k%2 == 0 {
				// The mean of the last two steps; both are the same
				// process's but at a change of turn.
				for p := range 2 {
					prev := [2]uint32{80, 0}
					if (at-200*time.Millisecond)/(700*time.Millisecond)%2 == 1 {
						prev = [2]uint32{0, 40}
					}
					if at <= 5100*time.Millisecond || at > 58*time.Second {
						prev = [2]uint32{}
					}
					if m := (u[p] + prev[p]) / 2; m > 0 {
						queue = append(queue, pend{nvmlsource.Sample{Pid: uint32(1 + p), TimeStamp: uint64(rings.wall().UnixMicro()), SmUtil: m}, rings.t + 400e6})
					}
				}
			}
			for len(queue) > 0 && queue[0].at <= rings.t {
				lister.samples = append(lister.samples, queue[0].s)
				queue = queue[1:]
			}
			if k%10 == 0 {
				ag.Pass()
				if testing.Verbose() {
					tt := ag.Totals(0)
					t.Logf("%v: %d %d truth %.0f %.0f idle %d unat %d", at, tt.Processes[agent.Process{Pid: 1, StartTime: 1}], tt.Processes[agent.Process{Pid: 2, StartTime: 2}], truth[0], truth[1], tt.IdleMJ, tt.UnattributedMJ)
				}
			}
		}
		tot := ag.Totals(0)
		for p := range 2 {
			got := float64(tot.Processes[agent.Process{Pid: uint32(1 + p), StartTime: uint64(1 + p)}])
			if e := got/truth[p] - 1; math.Abs(e) > 0.02 {
				t.Errorf("step %v: pid %d %.0f J, truth %.0f J (%+.1f%%)", step, 1+p, got/1000, truth[p]/1000, 100*e)
			}
		}
		if tot.UnattributedMJ > tot.EnergyMJ/200 {
			t.Errorf("step %v: %d mJ unattributed of %d", step, tot.UnattributedMJ, tot.EnergyMJ)
		}
		ag.Shutdown()
		mp.Shutdown(context.Background())
	}
}
