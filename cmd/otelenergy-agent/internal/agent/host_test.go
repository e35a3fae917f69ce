package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/hostshare"
	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/cputime"
	"github.com/otelenergy/otelenergy/internal/fakesysfs"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/procfs"
)

// fixedList lists the same processes at every pass, at 50 % SM each.
type fixedList []uint32

func (l fixedList) Read(_ int, b *nvmlsource.BoardProcesses) error {
	b.Reset()
	for _, p := range l {
		b.Processes = append(b.Processes, nvmlsource.ProcessUsage{Pid: p, Listed: true, SmUtil: 50, Samples: 1})
	}
	return nil
}

// writeProc writes a fake /proc: stat with the node's busy and idle
// ticks, and each process's stat (its CPU ticks, start time pid×100) and
// comm.
func writeProc(t *testing.T, root string, busy, idle uint64, ticks map[uint32]uint64) {
	t.Helper()
	stat := fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\nbtime 1700000000\n", busy, idle)
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	for pid, tk := range ticks {
		dir := filepath.Join(root, strconv.Itoa(int(pid)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		st := fmt.Sprintf("%d (vllm) S 1 %d %d 0 -1 0 0 0 0 0 %d 0 0 0 20 0 4 0 %d 1 1\n", pid, pid, pid, tk, pid*100)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(st), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "comm"), []byte("vllm\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostBesideGPU runs the agent over a GPU board and a two-socket RAPL
// host, and checks what it exports: each GPU process's CPU energy per RAPL
// domain, by its CPU time, with the domain's hw.id and hw.type beside its
// process attributes, and per hw.id, GPU and RAPL alike, Σ process + idle
// + unattributed = hw.energy exactly.
func TestHostBesideGPU(t *testing.T) {
	sys, proc := t.TempDir(), t.TempDir()
	if err := fakesysfs.Write(sys, filepath.FromSlash("../../../../internal/rapl/testdata/twosocket.tree")); err != nil {
		t.Fatal(err)
	}
	src, _, err := energysource.Host(energysource.WithSysfs(sys))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fs := procfs.FS{Root: proc}
	var clock int64
	host, err := hostshare.New(hostshare.Config{Domains: src, CPU: &cputime.Trees{Root: fs.Root}, Now: func() int64 { clock += 1e9; return clock }})
	if err != nil {
		t.Fatal(err)
	}
	rings := newFakeRings(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ag, err := agent.New(agent.Config{Rings: rings, Lister: fixedList{10, 11}, Resolver: fs, IdleWatts: 50,
		MeterProvider: mp, SampleHold: -1, Host: host})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()

	writeProc(t, proc, 1000, 1000, map[uint32]uint64{10: 0, 11: 0})
	ag.Pass()
	// 1 s, 400 ticks of which 200 busy: process 10 used 100, 11 used 20.
	writeProc(t, proc, 1200, 1200, map[uint32]uint64{10: 100, 11: 20})
	if err := fakesysfs.Set(sys, "class/powercap/intel-rapl:0/energy_uj", strconv.Itoa(1000000123+2000000)); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		rings.push(10_000)
	}
	ag.Pass()

	// package-0: 2000 mJ; idle 1000; active 1000 over 200 busy ticks:
	// 10 gets 500, 11 gets 100, 400 is other processes'.
	tt := ag.HostTotals(0)
	p10, p11 := tt.Processes[hostshare.Process{Pid: 10, StartTime: 1000}], tt.Processes[hostshare.Process{Pid: 11, StartTime: 1100}]
	if tt.Device.ID != "intel-rapl:0" || tt.EnergyMJ != 2000 || tt.IdleMJ != 1000 || p10 != 500 || p11 != 100 || tt.UnattributedMJ != 400 {
		t.Fatalf("package-0: %+v", tt)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]map[string]int64{}
	var cpuSeries int
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			s, ok := m.Data.(metricdata.Sum[float64])
			if !ok {
				continue
			}
			for _, dp := range s.DataPoints {
				id, _ := dp.Attributes.Value(semconv.HwIDKey)
				if sums[id.AsString()] == nil {
					sums[id.AsString()] = map[string]int64{}
				}
				sums[id.AsString()][m.Name] += int64(dp.Value*1000 + 0.5)
				ty, _ := dp.Attributes.Value(semconv.HwTypeKey)
				pid, hasPid := dp.Attributes.Value(semconv.ProcessPIDKey)
				if m.Name == "otelenergy.process.energy" && id.AsString() == "intel-rapl:0" && hasPid && pid.AsInt64() == 10 {
					cpuSeries++
					name, _ := dp.Attributes.Value(semconv.ProcessExecutableNameKey)
					if ty.AsString() != "cpu" || name.AsString() != "vllm" || dp.Value != 0.5 {
						t.Errorf("process 10 on package-0: %v = %v", dp.Attributes.ToSlice(), dp.Value)
					}
				}
			}
		}
	}
	if cpuSeries != 1 {
		t.Errorf("%d series of process 10 on package-0, want 1", cpuSeries)
	}
	for _, id := range []string{"GPU-0", "intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1", "intel-rapl:1:1"} {
		s := sums[id]
		if s["hw.energy"] == 0 && id != "intel-rapl:0:1" && id != "intel-rapl:1" && id != "intel-rapl:1:1" {
			t.Errorf("%s: no hw.energy", id)
		}
		if got := s["otelenergy.process.energy"] + s["otelenergy.energy.idle"] + s["otelenergy.energy.unattributed"]; got != s["hw.energy"] {
			t.Errorf("%s: process + idle + unattributed = %d mJ, hw.energy %d mJ", id, got, s["hw.energy"])
		}
	}
}

// TestHostPassCollectConcurrentSafe runs passes over a GPU board and a
// RAPL host while collections export them, for the race detector.
func TestHostPassCollectConcurrentSafe(t *testing.T) {
	sys, proc := t.TempDir(), t.TempDir()
	if err := fakesysfs.Write(sys, filepath.FromSlash("../../../../internal/rapl/testdata/twosocket.tree")); err != nil {
		t.Fatal(err)
	}
	writeProc(t, proc, 1000, 1000, map[uint32]uint64{10: 0, 11: 0})
	src, _, err := energysource.Host(energysource.WithSysfs(sys))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fs := procfs.FS{Root: proc}
	host, err := hostshare.New(hostshare.Config{Domains: src, CPU: &cputime.Trees{Root: fs.Root}})
	if err != nil {
		t.Fatal(err)
	}
	rings := newFakeRings(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ag, err := agent.New(agent.Config{Rings: rings, Lister: fixedList{10, 11}, Resolver: fs, MeterProvider: mp, SampleHold: -1, Host: host})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 100 {
			rings.push(1000)
			ag.Pass()
			_ = ag.HostTotals(0)
		}
	})
	wg.Go(func() {
		for range 100 {
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	if ag.Passes() != 100 {
		t.Fatalf("%d passes", ag.Passes())
	}
}
