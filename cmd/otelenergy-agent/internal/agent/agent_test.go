package agent_test

import (
	"context"
	"sync"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/procfs"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/ring"
)

// fakeRings is one board whose counter steps the test pushes.
type fakeRings struct {
	r *ring.Ring
	t int64
	e uint64
}

func newFakeRings(t testing.TB) *fakeRings {
	r, err := ring.New(1 << 12)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRings{r: r}
	f.push(0)
	return f
}

func (f *fakeRings) push(mj uint64) {
	f.t += 100e6
	f.e += mj
	_ = f.r.Push(ring.Point{T: f.t, EnergyMJ: f.e})
}

func (f *fakeRings) Devices() []otelenergy.Device {
	return []otelenergy.Device{{ID: "GPU-0", Name: "fake", Vendor: "NVIDIA", Type: "gpu"}}
}

func (f *fakeRings) Ring(int) (ring.View, error) { return f.r.View(), nil }

// churn lists n fresh processes per pass, each at 10 % SM, and is the
// node's /proc for them: a process runs only while it is listed.
type churn struct {
	next uint32
	n    int
}

func (c *churn) Read(_ int, b *nvmlsource.BoardProcesses) error {
	b.Reset()
	for range c.n {
		c.next++
		b.Processes = append(b.Processes, nvmlsource.ProcessUsage{Pid: c.next, Listed: true, SmUtil: 10, Samples: 1})
	}
	return nil
}

// StartTime and Info are called only within a pass, after its listing,
// like Read from one goroutine at a time.
func (c *churn) StartTime(pid uint32) (uint64, error) {
	if pid+uint32(c.n) <= c.next || pid > c.next {
		return 0, procfs.ErrGone
	}
	return uint64(pid), nil
}

func (c *churn) Info(pid uint32) (procfs.Info, error) {
	st, err := c.StartTime(pid)
	return procfs.Info{StartTime: st, Name: "short"}, err
}

// TestChurnBounded lists 50 new processes at every pass, 5,000 in all,
// against a cap of 64 series, exporting every tenth pass: the series held
// stay within the cap, the processes beyond it are counted and their
// energy goes to the overflow series, and every pass conserves the board's
// energy exactly.
func TestChurnBounded(t *testing.T) {
	rings := newFakeRings(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ch := &churn{n: 50}
	ag, err := agent.New(agent.Config{Rings: rings, Lister: ch, Resolver: ch, MaxSeries: 64, IdleWatts: 50, MeterProvider: mp, SampleHold: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	maxHeld := 0
	for pass := 1; pass <= 100; pass++ {
		for range 10 {
			rings.push(12_345)
		}
		ag.Pass()
		tot := ag.Totals(0)
		var procs uint64
		for _, mj := range tot.Processes {
			procs += mj
		}
		maxHeld = max(maxHeld, len(tot.Processes))
		if got := procs + tot.IdleMJ + tot.UnattributedMJ + tot.ExitedMJ + tot.OverflowMJ; got != tot.EnergyMJ || tot.EnergyMJ != rings.e {
			t.Fatalf("pass %d: parts %d, energy %d, pushed %d", pass, got, tot.EnergyMJ, rings.e)
		}
		if pass%10 == 0 {
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
		}
	}
	if maxHeld > 64 {
		t.Errorf("%d series held, cap 64", maxHeld)
	}
	tot := ag.Totals(0)
	if tot.OverflowMJ == 0 || tot.ExitedMJ == 0 {
		t.Errorf("overflow %d mJ, exited %d mJ: want both positive", tot.OverflowMJ, tot.ExitedMJ)
	}
	// Each pass's window is 1 s of 12,345 mJ steps at 50 W static: 5 J
	// idle per second, the rest to the processes.
	if want := uint64(100 * 10 * 5000); tot.IdleMJ != want {
		t.Errorf("idle %d mJ, want %d", tot.IdleMJ, want)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var overflowed int64 = -1
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "otelenergy.agent.series.overflow" {
				overflowed = m.Data.(metricdata.Sum[int64]).DataPoints[0].Value
			}
		}
	}
	// 5,000 processes; at most 64 held at a time, freed every tenth pass.
	if overflowed <= 0 || overflowed >= 5000 {
		t.Errorf("overflow counter %d, want between 0 and 5000", overflowed)
	}
}

// TestPassCollectConcurrentSafe runs passes and collections at once, for
// the race detector.
func TestPassCollectConcurrentSafe(t *testing.T) {
	rings := newFakeRings(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ch := &churn{n: 5}
	ag, err := agent.New(agent.Config{Rings: rings, Lister: ch, Resolver: ch, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 200 {
			rings.push(1000)
			ag.Pass()
		}
	})
	wg.Go(func() {
		for range 200 {
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Error(err)
				return
			}
			_ = ag.Ready()
		}
	})
	wg.Wait()
	if !ag.Ready() || ag.Passes() != 200 {
		t.Fatalf("ready %v after %d passes", ag.Ready(), ag.Passes())
	}
}

// anyProc resolves every pid as a live process that started at tick pid,
// so that no series ends for want of a process table.
type anyProc struct{}

func (anyProc) StartTime(pid uint32) (uint64, error) { return uint64(pid), nil }
func (anyProc) Info(pid uint32) (procfs.Info, error) {
	return procfs.Info{StartTime: uint64(pid), Name: "short"}, nil
}
