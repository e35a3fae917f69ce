package agent_test

import (
	"context"
	"math"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/procfs"
)

// lateLister lists one process on pid 5 (start time start, none when 0)
// and the samples visible by now, sampled-only pids unlisted.
type lateLister struct {
	rings *clockRings
	start uint64
	queue []lateSample
}

type lateSample struct {
	s  nvmlsource.Sample
	at int64 // ring time it becomes visible
}

func (l *lateLister) Read(_ int, b *nvmlsource.BoardProcesses) error {
	b.Reset()
	if l.start != 0 {
		b.Processes = append(b.Processes, nvmlsource.ProcessUsage{Pid: 5, Listed: true})
	}
	for len(l.queue) > 0 && l.queue[0].at <= l.rings.t {
		b.Samples = append(b.Samples, l.queue[0].s)
		l.queue = l.queue[1:]
	}
	if l.start == 0 && len(b.Samples) > 0 {
		b.Processes = append(b.Processes, nvmlsource.ProcessUsage{Pid: 5, Samples: len(b.Samples)})
	}
	return nil
}

func (l *lateLister) StartTime(pid uint32) (uint64, error) {
	if pid != 5 || l.start == 0 {
		return 0, procfs.ErrGone
	}
	return l.start, nil
}

func (l *lateLister) Info(pid uint32) (procfs.Info, error) {
	st, err := l.StartTime(pid)
	return procfs.Info{StartTime: st, Name: "p"}, err
}

// TestHeldEnergyOfAnEndedProcess: samples are listed 1.5 s after their
// stamps, so a process's last second is held past its exit and past the
// export that ends its series. On pid 5, process A (200 W) runs from 3 s
// to 10 s, and then, in one run, the board idles; in the other, process
// B reuses pid 5 at once and draws 100 W to the end. A's held energy
// goes to the exited series, never to unattributed nor to B; B gets its
// own energy. The board idles at 70 W with no process at first.
func TestHeldEnergyOfAnEndedProcess(t *testing.T) {
	for _, reuse := range []bool{false, true} {
		base := time.Unix(1_700_000_000, 0)
		rings := &clockRings{fakeRings: newFakeRings(t), base: base}
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		l := &lateLister{rings: rings}
		// Boot 100 s before base: a start time of 10,300 ticks is 3 s
		// after base. The ring's first step ends at 100 ms, so step k
		// ends at (k+1)·100 ms: A runs from 3.1 s, B from 10.1 s
		// (11,010 ticks).
		ag, err := agent.New(agent.Config{Rings: rings, Lister: l, Resolver: l, MeterProvider: mp,
			BootTime: base.Add(-100 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		var truthA, truthB float64
		for k := 1; k <= 250; k++ { // 25 s
			at := time.Duration(k) * 100 * time.Millisecond
			var sm uint32
			switch {
			case at > 3*time.Second && at <= 10*time.Second:
				sm = 50
				truthA += 200 * 100
				l.start = 10_300
			case reuse && at > 10*time.Second:
				// B idles from 22 s, listed: its energy is all split.
				l.start = 11_010
				if at <= 22*time.Second {
					sm = 25
					truthB += 100 * 100
				}
			default:
				l.start = 0
			}
			rings.push(7_000 + 400*uint64(sm))
			if k%2 == 0 && sm > 0 {
				l.queue = append(l.queue, lateSample{nvmlsource.Sample{Pid: 5, TimeStamp: uint64(rings.wall().UnixMicro()), SmUtil: sm}, rings.t + 1500e6})
			}
			if k%10 == 0 {
				ag.Pass()
				var rm metricdata.ResourceMetrics
				if err := reader.Collect(context.Background(), &rm); err != nil {
					t.Fatal(err)
				}
				if testing.Verbose() {
					tt := ag.Totals(0)
					t.Logf("%v: A+ %d B %d truth %.0f %.0f idle %d", at, tt.ExitedMJ+tt.Processes[agent.Process{Pid: 5, StartTime: 10_300}], tt.Processes[agent.Process{Pid: 5, StartTime: 11_010}], truthA, truthB, tt.IdleMJ)
				}
			}
		}
		tot := ag.Totals(0)
		t.Logf("reuse %v: idle %.1f W from %s, idle %d unattributed %d of %d mJ", reuse, tot.IdleWatts, tot.IdleSource, tot.IdleMJ, tot.UnattributedMJ, tot.EnergyMJ)
		b := float64(tot.Processes[agent.Process{Pid: 5, StartTime: 11_010}])
		a := float64(tot.ExitedMJ)
		if e := a/truthA - 1; math.Abs(e) > 0.02 {
			t.Errorf("reuse %v: A %.0f J, truth %.0f J (%+.1f%%)", reuse, a/1000, truthA/1000, 100*e)
		}
		if reuse {
			if e := b/truthB - 1; math.Abs(e) > 0.02 {
				t.Errorf("B %.0f J, truth %.0f J (%+.1f%%)", b/1000, truthB/1000, 100*e)
			}
		}
		if tot.UnattributedMJ > tot.EnergyMJ/200 {
			t.Errorf("reuse %v: %d mJ unattributed of %d", reuse, tot.UnattributedMJ, tot.EnergyMJ)
		}
		ag.Shutdown()
		mp.Shutdown(context.Background())
	}
}
