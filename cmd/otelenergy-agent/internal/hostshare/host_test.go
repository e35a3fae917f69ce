package hostshare_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/hostshare"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procfs"
	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/fakesysfs"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// node is a fake host: the two-socket RAPL tree of internal/rapl and a
// /proc with a stat file and processes whose CPU times the test sets.
type node struct {
	t          testing.TB
	sys, proc  string
	uj         map[string]uint64 // each zone's energy_uj
	max        map[string]uint64
	busy, idle uint64
}

func newNode(t testing.TB) *node {
	t.Helper()
	n := &node{t: t, sys: t.TempDir(), proc: t.TempDir(),
		uj: map[string]uint64{
			"intel-rapl:0": 1000000123, "intel-rapl:0:1": 200000000,
			"intel-rapl:1": 262140000000, "intel-rapl:1:1": 65710000000,
			"intel-rapl:2": 3000000000,
		},
		max: map[string]uint64{
			"intel-rapl:0": 262143328850, "intel-rapl:0:1": 65712999613,
			"intel-rapl:1": 262143328850, "intel-rapl:1:1": 65712999613,
			"intel-rapl:2": 262143328850,
		},
		busy: 5000, idle: 20000}
	if err := fakesysfs.Write(n.sys, filepath.FromSlash("../../../../internal/rapl/testdata/twosocket.tree")); err != nil {
		t.Fatal(err)
	}
	n.writeStat()
	return n
}

// addEnergy adds mj millijoules to a zone's counter, wrapping at its range
// as the hardware does.
func (n *node) addEnergy(zone string, mj uint64) {
	v := (n.uj[zone] + mj*1000) % (n.max[zone] + 1)
	n.uj[zone] = v
	if err := fakesysfs.Set(n.sys, "class/powercap/"+zone+"/energy_uj", strconv.FormatUint(v, 10)); err != nil {
		n.t.Fatal(err)
	}
}

// cpu advances the node's CPU time by busy and idle ticks.
func (n *node) cpu(busy, idle uint64) {
	n.busy += busy
	n.idle += idle
	n.writeStat()
}

func (n *node) writeStat() {
	// user nice system idle iowait irq softirq steal guest guest_nice:
	// busy all in user, idle split between idle and iowait.
	line := fmt.Sprintf("cpu  %d 0 0 %d %d 0 0 0 0 0\nbtime 1700000000\n", n.busy, n.idle-n.idle/4, n.idle/4)
	if err := os.WriteFile(filepath.Join(n.proc, "stat"), []byte(line), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// process writes pid's stat with its CPU ticks split between utime and
// stime.
func (n *node) process(pid uint32, start, ticks uint64) {
	dir := filepath.Join(n.proc, strconv.Itoa(int(pid)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		n.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (python3) S 1 %d %d 0 -1 0 0 0 0 0 %d %d 0 0 20 0 4 0 %d 1 1\n", pid, pid, pid, ticks-ticks/3, ticks/3, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) open(t *testing.T) (*hostshare.Host, *fakeClock) {
	t.Helper()
	src, f, err := energysource.Host(energysource.WithSysfs(n.sys))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	whole, _, err := energysource.Host(energysource.WithSysfs(n.sys), energysource.WithRAPLDomains("psys"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { whole.Close() })
	if len(f.Devices) != 4 {
		t.Fatalf("finding %v", f)
	}
	clk := &fakeClock{}
	h, err := hostshare.New(hostshare.Config{Domains: src, Whole: whole, CPU: procfs.FS{Root: n.proc}, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return h, clk
}

type fakeClock struct{ t int64 }

// now advances a second per reading pass.
func (c *fakeClock) now() int64 { c.t += 1e9; return c.t }

func procs(ps ...uint32) []hostshare.Proc {
	var out []hostshare.Proc
	for _, p := range ps {
		out = append(out, hostshare.Proc{Pid: p, Start: uint64(p) * 100,
			Attrs: []attribute.KeyValue{semconv.ProcessPID(int(p))}})
	}
	return out
}

// TestPass drives a two-socket node through passes with known energy and
// CPU times, a wrap of package-1's counter included, and checks every
// domain's split against figures worked out by hand, and the identity.
func TestPass(t *testing.T) {
	n := newNode(t)
	n.process(10, 1000, 500)
	n.process(11, 1100, 70)
	h, _ := n.open(t)
	h.Pass(procs(10, 11)) // baselines

	// One second of 4 CPUs at 100 Hz: 400 ticks, 300 busy; process 10
	// used 120 of them, 11 used 60; the rest is other processes'.
	n.cpu(300, 100)
	n.process(10, 1000, 500+120)
	n.process(11, 1100, 70+60)
	n.addEnergy("intel-rapl:0", 1000)
	n.addEnergy("intel-rapl:0:1", 400)
	n.addEnergy("intel-rapl:1", 5000) // wraps: 3.33 J left in its range
	n.addEnergy("intel-rapl:1:1", 200)
	n.addEnergy("intel-rapl:2", 9000)
	if n.uj["intel-rapl:1"] > 262140000000 {
		t.Fatal("package-1 did not wrap")
	}
	// Process 10 runs on two boards: given twice, counted once.
	h.Pass(procs(10, 11, 10))

	// Each domain: idle = E/4; active = 3E/4 over 300 busy ticks; process
	// 10 gets 120/300 of it, 11 gets 60/300, the rest is unattributed.
	want := map[string][4]uint64{ // energy, idle, p10, p11
		"intel-rapl:0":   {1000, 250, 300, 150},
		"intel-rapl:0:1": {400, 100, 120, 60},
		"intel-rapl:1":   {5000, 1250, 1500, 750},
		"intel-rapl:1:1": {200, 50, 60, 30},
	}
	for i, d := range h.Devices()[:4] {
		tt := h.Totals(i)
		w := want[d.ID]
		p10, p11 := tt.Processes[hostshare.Process{Pid: 10, StartTime: 1000}], tt.Processes[hostshare.Process{Pid: 11, StartTime: 1100}]
		if tt.EnergyMJ != w[0] || tt.IdleMJ != w[1] || p10 != w[2] || p11 != w[3] {
			t.Errorf("%s: energy %d idle %d p10 %d p11 %d; want %v", d.ID, tt.EnergyMJ, tt.IdleMJ, p10, p11, w)
		}
		if un := w[0] - w[1] - w[2] - w[3]; tt.UnattributedMJ != un {
			t.Errorf("%s: unattributed %d, want %d", d.ID, tt.UnattributedMJ, un)
		}
	}
	if got := h.WholeEnergyMJ(0); got != 9000 {
		t.Errorf("psys %d mJ, want 9000", got)
	}

	// Process 11 ends; a new process 12 appears, and gets nothing for
	// the pass in which it is first seen.
	n.cpu(200, 200)
	n.process(10, 1000, 620+100)
	n.process(12, 1200, 40)
	if err := os.RemoveAll(filepath.Join(n.proc, "11")); err != nil {
		t.Fatal(err)
	}
	n.addEnergy("intel-rapl:0", 800)
	h.Pass(procs(10, 12))
	// package-0: 800 mJ, idle 400, active 400 over 200 busy ticks: 10 has
	// 100 of them.
	tt := h.Totals(0)
	if p10 := tt.Processes[hostshare.Process{Pid: 10, StartTime: 1000}]; p10 != 300+200 {
		t.Errorf("p10 %d, want 500", p10)
	}
	if p12 := tt.Processes[hostshare.Process{Pid: 12, StartTime: 1200}]; p12 != 0 {
		t.Errorf("p12 %d on its first pass, want 0", p12)
	}
	checkExport(t, h)
	// After an export, 11's series has ended and its total is the
	// domain's exited series.
	if tt := h.Totals(0); tt.ExitedMJ != 150 {
		t.Errorf("exited %d, want 150", tt.ExitedMJ)
	}
	checkExport(t, h)
}

// checkExport exports through a real SDK reader and checks per hw.id:
// Σ process + idle + unattributed = hw.energy, exactly in mJ, and psys
// only on hw.host.energy.
func checkExport(t *testing.T, h *hostshare.Host) {
	t.Helper()
	rd := metric.NewManualReader()
	mp := metric.NewMeterProvider(metric.WithReader(rd))
	m := mp.Meter("test")
	var in hostshare.Instruments
	in.Energy, _ = m.Float64ObservableCounter("hw.energy")
	in.Process, _ = m.Float64ObservableCounter("otelenergy.process.energy")
	in.Idle, _ = m.Float64ObservableCounter("otelenergy.energy.idle")
	in.Unattributed, _ = m.Float64ObservableCounter("otelenergy.energy.unattributed")
	in.HostEnergy, _ = m.Float64ObservableCounter("hw.host.energy")
	_, err := m.RegisterCallback(func(_ context.Context, o otelmetric.Observer) error {
		h.Observe(o, in)
		return nil
	}, in.Energy, in.Process, in.Idle, in.Unattributed, in.HostEnergy)
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]map[string]int64{} // hw.id -> metric -> mJ
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			for _, dp := range mt.Data.(metricdata.Sum[float64]).DataPoints {
				id, _ := dp.Attributes.Value(semconv.HwIDKey)
				if sums[id.AsString()] == nil {
					sums[id.AsString()] = map[string]int64{}
				}
				sums[id.AsString()][mt.Name] += int64(dp.Value*1000 + 0.5)
				if mt.Name == "hw.energy" || mt.Name == "otelenergy.process.energy" {
					if ty, _ := dp.Attributes.Value(semconv.HwTypeKey); ty.AsString() != "cpu" && ty.AsString() != "memory" {
						t.Errorf("%s on %s has hw.type %q", mt.Name, id.AsString(), ty.AsString())
					}
				}
			}
		}
	}
	for id, s := range sums {
		if id == "intel-rapl:2" {
			if len(s) != 1 || s["hw.host.energy"] == 0 {
				t.Errorf("psys exported as %v, want hw.host.energy only", s)
			}
			continue
		}
		if got := s["otelenergy.process.energy"] + s["otelenergy.energy.idle"] + s["otelenergy.energy.unattributed"]; got != s["hw.energy"] {
			t.Errorf("%s: process + idle + unattributed = %d mJ, hw.energy %d mJ", id, got, s["hw.energy"])
		}
	}
	if len(sums) != 5 {
		t.Errorf("exported hw.ids %v, want 4 domains and psys", sums)
	}
	if err := mp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// flaky fails its reads when fail is set.
type flaky struct {
	otelenergy.Source
	fail bool
}

func (f *flaky) ReadEnergy(i int) (uint64, error) {
	if f.fail {
		return 0, errors.New("read failed")
	}
	return f.Source.ReadEnergy(i)
}

// TestFailures: a domain whose read fails keeps its figures and its next
// interval, which spans two passes, is unattributed; so is every domain's
// energy over a pass whose /proc/stat is unreadable.
func TestFailures(t *testing.T) {
	n := newNode(t)
	n.process(10, 1000, 0)
	src, _, err := energysource.Host(energysource.WithSysfs(n.sys))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fl := &flaky{Source: src}
	clk := &fakeClock{}
	h, err := hostshare.New(hostshare.Config{Domains: fl, CPU: procfs.FS{Root: n.proc}, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	step := func(mj, ticks uint64) {
		n.cpu(100, 0)
		n.process(10, 1000, ticks)
		n.addEnergy("intel-rapl:0", mj)
		h.Pass(procs(10))
	}
	h.Pass(procs(10))
	step(100, 100) // all busy, all process 10's: 100
	fl.fail = true
	step(100, 200)
	fl.fail = false
	step(100, 300) // 200 mJ over two passes: unattributed
	step(100, 400) // 100 again to process 10
	tt := h.Totals(0)
	if p := tt.Processes[hostshare.Process{Pid: 10, StartTime: 1000}]; tt.EnergyMJ != 400 || p != 200 || tt.UnattributedMJ != 200 || tt.ReadErrors != 1 {
		t.Fatalf("after a failed read: %+v", tt)
	}
	if err := os.Remove(filepath.Join(n.proc, "stat")); err != nil {
		t.Fatal(err)
	}
	n.addEnergy("intel-rapl:0", 100)
	h.Pass(procs(10))
	n.cpu(100, 0) // readable again: a new baseline, not a split
	n.addEnergy("intel-rapl:0", 100)
	h.Pass(procs(10))
	step(100, 500)
	tt = h.Totals(0)
	if p := tt.Processes[hostshare.Process{Pid: 10, StartTime: 1000}]; tt.EnergyMJ != 700 || p != 300 || tt.UnattributedMJ != 400 {
		t.Fatalf("after an unreadable /proc/stat: %+v", tt)
	}
}
