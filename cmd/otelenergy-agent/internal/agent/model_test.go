package agent_test

import (
	"context"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
)

// stamped lists one process whose samples carry timestamps on the
// agent's clock: one sample per 100 ms step, at SM util(step).
type stamped struct {
	samples []nvmlsource.Sample
}

func (s *stamped) Read(_ int, b *nvmlsource.BoardProcesses) error {
	b.Reset()
	if len(s.samples) > 0 {
		b.Processes = append(b.Processes, nvmlsource.ProcessUsage{Pid: 42, Listed: true, Samples: len(s.samples)})
	}
	b.Samples = append(b.Samples, s.samples...)
	s.samples = s.samples[:0]
	return nil
}

// TestModelGauges runs a board idle at 70 W for 5 s, then one process
// whose SM utilization alternates between 30 % and 70 % and draws 4 W per
// percent, and reads the gauges: the idle power from idle intervals with
// the seconds behind it, and the model's coefficients.
func TestModelGauges(t *testing.T) {
	rings := newFakeRings(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	lister := &stamped{}
	epoch := time.Unix(1_700_000_000, 0)
	ag, err := agent.New(agent.Config{Rings: rings, Lister: lister, Resolver: anyProc{}, MeterProvider: mp,
		Now: func() time.Time { return epoch.Add(time.Duration(rings.t)) }, Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	for sec := range 60 {
		for range 10 {
			if sec < 5 {
				rings.push(7_000)
				continue
			}
			u := uint32(30)
			if sec%2 == 1 {
				u = 70
			}
			rings.push(7_000 + uint64(u)*400)
			ts := uint64(epoch.Add(time.Duration(rings.t)).UnixMicro())
			lister.samples = append(lister.samples, nvmlsource.Sample{Pid: 42, TimeStamp: ts, SmUtil: u})
		}
		ag.Pass()
		if testing.Verbose() {
			t.Logf("sec %d: %+v", sec, ag.Totals(0).UnattributedMJ)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	gauge := func(name string, kv attribute.KeyValue) (float64, bool) {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				for _, dp := range m.Data.(metricdata.Gauge[float64]).DataPoints {
					if v, ok := dp.Attributes.Value(kv.Key); ok && v == kv.Value {
						return dp.Value, true
					}
				}
			}
		}
		return 0, false
	}
	src := agent.IdleSourceKey.String("idle_intervals")
	if w, ok := gauge("otelenergy.agent.idle.power", src); !ok || math.Abs(w-70) > 0.01 {
		t.Errorf("idle power %v (found %v), want 70 W from idle intervals", w, ok)
	}
	if s, ok := gauge("otelenergy.agent.idle.data", src); !ok || s < 2 || s > 5 {
		t.Errorf("idle data %v s (found %v), want the idle seconds split, 2 to 5", s, ok)
	}
	if c, _ := gauge("otelenergy.agent.power_model.coefficient", agent.TermKey.String("sm")); math.Abs(c-400) > 4 {
		t.Errorf("SM coefficient %v W, want 400 W at 100 %%", c)
	}
	if c, _ := gauge("otelenergy.agent.power_model.coefficient", agent.TermKey.String("memory")); c != 0 {
		t.Errorf("memory coefficient %v W, want 0", c)
	}
	tot := ag.Totals(0)
	if tot.IdleSource != "idle_intervals" || tot.IdleData < 2 || math.Abs(tot.IdleWatts-70) > 0.01 {
		t.Errorf("Totals: idle %.2f W from %q on %.1f s", tot.IdleWatts, tot.IdleSource, tot.IdleData)
	}
	var procs uint64
	for _, mj := range tot.Processes {
		procs += mj
	}
	if procs+tot.IdleMJ+tot.UnattributedMJ != tot.EnergyMJ || tot.UnattributedMJ > tot.EnergyMJ/1000 {
		t.Errorf("process %d + idle %d + unattributed %d vs energy %d", procs, tot.IdleMJ, tot.UnattributedMJ, tot.EnergyMJ)
	}
}

// TestHoldByTheRing: the Monitor runs on a clock of its own (here the
// ring's times count from zero while the agent is on the real clock), and
// the board lists no process and gives no sample. Its intervals are held
// for their samples no longer than the hold, timed by the ring: hw.energy
// follows the counter, two seconds behind.
func TestHoldByTheRing(t *testing.T) {
	rings := newFakeRings(t)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	ag, err := agent.New(agent.Config{Rings: rings, Lister: &stamped{}, Resolver: anyProc{}, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	for range 10 {
		for range 10 {
			rings.push(7_000)
		}
		ag.Pass()
	}
	// 100 steps of 7 J pushed over 10 s; at most the last 2 s are held.
	tot := ag.Totals(0)
	if tot.EnergyMJ < 80*7_000 {
		t.Fatalf("hw.energy %d mJ of %d pushed: intervals held past their hold", tot.EnergyMJ, rings.e)
	}
	// Where the held energy went: an idle board's is idle, all of it
	// but the rounding of a forgetting mean (under 1 mJ an interval).
	if tot.IdleMJ+tot.UnattributedMJ != tot.EnergyMJ || tot.UnattributedMJ > 80 || len(tot.Processes) != 0 {
		t.Errorf("idle %d unattributed %d processes %v of %d mJ split: want it all idle", tot.IdleMJ, tot.UnattributedMJ, tot.Processes, tot.EnergyMJ)
	}
}
