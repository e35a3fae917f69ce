package hostshare_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/hostshare"
	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/cputime"
	"github.com/otelenergy/otelenergy/internal/fakeclock"
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
func (n *node) process(pid uint32, start, ticks uint64) { n.child(pid, 1, start, ticks, 0) }

// child writes pid's stat as a child of ppid, with its own ticks and
// reaped ticks of its own children.
func (n *node) child(pid, ppid uint32, start, ticks, reaped uint64) {
	dir := filepath.Join(n.proc, strconv.Itoa(int(pid)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		n.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (python3) S %d %d %d 0 -1 0 0 0 0 0 %d %d %d 0 20 0 4 0 %d 1 1\n", pid, ppid, pid, pid, ticks-ticks/3, ticks/3, reaped, start)
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
	clk := newFakeClock()
	h, err := hostshare.New(hostshare.Config{Domains: src, Whole: whole, CPU: &cputime.Trees{Root: n.proc}, Now: clk.Stepping(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return h, clk
}

// fakeClock advances a second per reading pass (Stepping).
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock { return fakeclock.New(fakeclock.Epoch()) }

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
	h.Pass(procs(10, 11), nil) // baselines

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
	h.Pass(procs(10, 11, 10), nil)

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

	// Process 11 ends; a new process 12 appears: it was in no scan
	// before, so it started in this interval, and all of its time is
	// the interval's.
	n.cpu(200, 200)
	n.process(10, 1000, 620+100)
	n.process(12, 1200, 40)
	if err := os.RemoveAll(filepath.Join(n.proc, "11")); err != nil {
		t.Fatal(err)
	}
	n.addEnergy("intel-rapl:0", 800)
	h.Pass(procs(10, 12), nil)
	// package-0: 800 mJ, idle 400, active 400 over 200 busy ticks: 10 has
	// 100 of them, 12 its 40.
	tt := h.Totals(0)
	if p10 := tt.Processes[hostshare.Process{Pid: 10, StartTime: 1000}]; p10 != 300+200 {
		t.Errorf("p10 %d, want 500", p10)
	}
	if p12 := tt.Processes[hostshare.Process{Pid: 12, StartTime: 1200}]; p12 != 80 {
		t.Errorf("p12 %d on its first pass, want 80", p12)
	}
	checkExport(t, h, nil)
	// After an export, 11's series has ended and its total is the
	// domain's exited series.
	if tt := h.Totals(0); tt.ExitedMJ != 150 {
		t.Errorf("exited %d, want 150", tt.ExitedMJ)
	}
	checkExport(t, h, nil)
}

// TestPassCountsChildren: a tracked process's CPU time includes its
// children's, as the library's cputime counts a tree: a server whose
// tokenizer workers or data loaders burn the CPU is charged their energy,
// a worker reaped in between is not counted twice, and a child that is
// tracked itself keeps its own.
func TestPassCountsChildren(t *testing.T) {
	n := newNode(t)
	n.process(10, 1000, 50)
	n.child(20, 10, 2000, 10, 0) // 10's worker
	n.child(21, 20, 2100, 10, 0) // the worker's own child
	n.process(11, 1100, 100)
	n.child(30, 11, 3000, 0, 0) // 11's child, tracked on its own
	h, _ := n.open(t)
	h.Pass(procs(10, 11, 30), nil) // baselines

	// 400 ticks, 300 busy: 10 used 10 itself and its workers 50 and 30;
	// 11 used 60, its tracked child 30 used 60.
	n.cpu(300, 100)
	n.process(10, 1000, 60)
	n.child(20, 10, 2000, 60, 0)
	n.child(21, 20, 2100, 40, 0)
	n.process(11, 1100, 160)
	n.child(30, 11, 3000, 60, 0)
	n.addEnergy("intel-rapl:0", 1000)
	h.Pass(procs(10, 11, 30), nil)
	// idle 250, active 750 = 2.5 mJ a busy tick.
	p := func(pid uint32, start uint64) uint64 {
		return h.Totals(0).Processes[hostshare.Process{Pid: pid, StartTime: start}]
	}
	if p10, p11, p30 := p(10, 1000), p(11, 1100), p(30, 3000); p10 != 225 || p11 != 150 || p30 != 150 {
		t.Fatalf("p10 %d p11 %d p30 %d; want 225 (90 ticks with its children's), 150, 150", p10, p11, p30)
	}

	// The worker's child exits and the worker reaps it: its 40 ticks and
	// 20 more move into the worker's reaped time. Only the 20 and the
	// worker's own 20 are this interval's.
	n.cpu(300, 100)
	if err := os.RemoveAll(filepath.Join(n.proc, "21")); err != nil {
		t.Fatal(err)
	}
	n.child(20, 10, 2000, 80, 60)
	n.addEnergy("intel-rapl:0", 1000)
	h.Pass(procs(10, 11, 30), nil)
	if p10 := p(10, 1000); p10 != 225+100 {
		t.Fatalf("after a reaped grandchild p10 %d, want %d (40 ticks, not 80)", p10, 225+100)
	}
	tt := h.Totals(0)
	var sum uint64
	for _, mj := range tt.Processes {
		sum += mj
	}
	if sum+tt.IdleMJ+tt.UnattributedMJ != tt.EnergyMJ || tt.EnergyMJ != 2000 {
		t.Fatalf("Σ processes %d + idle %d + unattributed %d != energy %d (2000)", sum, tt.IdleMJ, tt.UnattributedMJ, tt.EnergyMJ)
	}
}

// ticksCPU is a CPU with no trees, as the simulator's: each process's own
// ticks, set by the test.
type ticksCPU struct {
	busy, total uint64
	own         map[uint32]uint64
}

func (c *ticksCPU) NodeTicks() (busy, total uint64, err error) { return c.busy, c.total, nil }
func (c *ticksCPU) CPUTicks(pid uint32) (ticks, start uint64, err error) {
	t, ok := c.own[pid]
	if !ok {
		return 0, 0, errors.New("gone")
	}
	return t, uint64(pid) * 100, nil
}

// TestPassOwnTicks: a CPU that measures no trees (the simulator's) splits
// by each process's own ticks, from its second pass on.
func TestPassOwnTicks(t *testing.T) {
	n := newNode(t)
	src, _, err := energysource.Host(energysource.WithSysfs(n.sys))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	cpu := &ticksCPU{busy: 1000, total: 4000, own: map[uint32]uint64{10: 50, 11: 70}}
	h, err := hostshare.New(hostshare.Config{Domains: src, CPU: cpu, Now: newFakeClock().Stepping(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	h.Pass(procs(10, 11), nil)
	cpu.busy, cpu.total = 1300, 4400 // 300 of 400 busy
	cpu.own[10], cpu.own[11] = 170, 130
	cpu.own[12] = 40 // new: nothing on its first pass
	n.addEnergy("intel-rapl:0", 1000)
	h.Pass(procs(10, 11, 12), nil)
	tt := h.Totals(0)
	p := func(pid uint32) uint64 {
		return tt.Processes[hostshare.Process{Pid: pid, StartTime: uint64(pid) * 100}]
	}
	// idle 250; active 750 over 300 busy ticks: 10 has 120, 11 has 60.
	if p(10) != 300 || p(11) != 150 || p(12) != 0 || tt.IdleMJ != 250 {
		t.Fatalf("p10 %d p11 %d p12 %d idle %d; want 300, 150, 0, 250", p(10), p(11), p(12), tt.IdleMJ)
	}
}

// checkExport exports through a real SDK reader and checks per hw.id:
// Σ process + idle + unattributed = hw.energy, exactly in mJ, and psys
// only on hw.host.energy. With wantUG, it exports emissions too and
// checks per hw.id Σ process.co2e + co2e.unattributed = wantUG[hw.id]
// exactly in µg, and that every process.co2e series has the attributes
// of a process.energy series; without, that none is exported.
func checkExport(t *testing.T, h *hostshare.Host, wantUG map[string]uint64) {
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
	observed := []otelmetric.Observable{in.Energy, in.Process, in.Idle, in.Unattributed, in.HostEnergy}
	if wantUG != nil {
		in.ProcessCo2e, _ = m.Float64ObservableCounter("otelenergy.process.co2e")
		in.Co2eUnattributed, _ = m.Float64ObservableCounter("otelenergy.co2e.unattributed")
		observed = append(observed, in.ProcessCo2e, in.Co2eUnattributed)
	}
	_, err := m.RegisterCallback(func(_ context.Context, o otelmetric.Observer) error {
		h.Observe(o, in)
		return nil
	}, observed...)
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]map[string]int64{} // hw.id -> metric -> mJ
	gotUG := map[string]uint64{}
	energySets := map[attribute.Distinct]bool{}
	var co2eSets []attribute.Set
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			for _, dp := range mt.Data.(metricdata.Sum[float64]).DataPoints {
				id, _ := dp.Attributes.Value(semconv.HwIDKey)
				switch mt.Name {
				case "otelenergy.process.co2e", "otelenergy.co2e.unattributed":
					if wantUG == nil {
						t.Errorf("%s exported without emissions", mt.Name)
					}
					gotUG[id.AsString()] += uint64(math.Round(dp.Value * 1e6))
					if mt.Name == "otelenergy.process.co2e" {
						co2eSets = append(co2eSets, dp.Attributes)
					}
					continue
				case "otelenergy.process.energy":
					energySets[dp.Attributes.Equivalent()] = true
				}
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
	if wantUG != nil {
		for id, want := range wantUG {
			if gotUG[id] != want {
				t.Errorf("%s: Σ process.co2e + co2e.unattributed = %d µg, want %d", id, gotUG[id], want)
			}
		}
		if len(gotUG) != len(wantUG) {
			t.Errorf("emissions on hw.ids %v, want %v", gotUG, wantUG)
		}
		for _, s := range co2eSets {
			if !energySets[s.Equivalent()] {
				t.Errorf("process.co2e series %v has no process.energy series", s.ToSlice())
			}
		}
		if len(co2eSets) != len(energySets) {
			t.Errorf("%d process.co2e series, %d process.energy series", len(co2eSets), len(energySets))
		}
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
	clk := newFakeClock()
	h, err := hostshare.New(hostshare.Config{Domains: fl, CPU: &cputime.Trees{Root: n.proc}, Now: clk.Stepping(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	step := func(mj, ticks uint64) {
		n.cpu(100, 0)
		n.process(10, 1000, ticks)
		n.addEnergy("intel-rapl:0", mj)
		h.Pass(procs(10), nil)
	}
	h.Pass(procs(10), nil)
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
	h.Pass(procs(10), nil)
	n.cpu(100, 0) // readable again: a new baseline, not a split
	n.addEnergy("intel-rapl:0", 100)
	h.Pass(procs(10), nil)
	step(100, 500)
	tt = h.Totals(0)
	if p := tt.Processes[hostshare.Process{Pid: 10, StartTime: 1000}]; tt.EnergyMJ != 700 || p != 300 || tt.UnattributedMJ != 400 {
		t.Fatalf("after an unreadable /proc/stat: %+v", tt)
	}
}

// factorEm converts at one factor, as the agent's model does at the
// reading in force at its pass.
type factorEm struct{ f carbon.Factor }

func (e factorEm) Convert(sharesMJ []uint64, restMJ uint64, ug []uint64) uint64 {
	return e.f.Operational(sharesMJ, restMJ, ug)
}

// TestPassCo2e converts a two-socket node's passes at two intensities (52
// and then 710 g/kWh, PUE 1.135), through a process that ends, one that
// appears and a pass whose /proc/stat is unreadable, and checks per
// domain Σ process µg + rest µg = Σ passes round(E × I × PUE), exactly,
// in Totals and through a real SDK reader, each process's µg within 1 µg
// a pass of its exact figure, and an ended process's µg moved to the
// exited series with its energy.
func TestPassCo2e(t *testing.T) {
	pue, err := carbon.ParsePUE("1.135")
	if err != nil {
		t.Fatal(err)
	}
	factor := func(mg uint64) factorEm {
		f, err := carbon.NewFactor(mg, pue)
		if err != nil {
			t.Fatal(err)
		}
		return factorEm{f}
	}
	f52, f710 := factor(52_000), factor(710_000)
	n := newNode(t)
	n.process(10, 1000, 500)
	n.process(11, 1100, 70)
	h, _ := n.open(t)
	h.Pass(procs(10, 11), f52) // baselines: no energy yet
	zones := []string{"intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1", "intel-rapl:1:1"}
	want := map[string]uint64{}
	exact := map[string]map[uint32]float64{} // zone -> pid -> µg
	pass := func(em factorEm, mg uint64, mj map[string]uint64, ps ...uint32) {
		t.Helper()
		before := map[string]hostshare.Totals{}
		for i, z := range zones {
			before[z] = h.Totals(i)
			n.addEnergy(z, mj[z])
		}
		h.Pass(procs(ps...), em)
		for i, z := range zones {
			tt, b := h.Totals(i), before[z]
			want[z] += em.f.Of(tt.EnergyMJ - b.EnergyMJ)
			if exact[z] == nil {
				exact[z] = map[uint32]float64{}
			}
			for p, e := range tt.Processes {
				exact[z][p.Pid] += float64(e-b.Processes[p]) * float64(mg) * pue.Float() / 3.6e6
			}
		}
	}
	// 400 ticks, 300 busy: 10 has 120, 11 has 60; package-1 wraps.
	n.addEnergy("intel-rapl:2", 900_000) // psys: never converted
	n.cpu(300, 100)
	n.process(10, 1000, 500+120)
	n.process(11, 1100, 70+60)
	pass(f52, 52_000, map[string]uint64{"intel-rapl:0": 100_000, "intel-rapl:0:1": 40_000, "intel-rapl:1": 500_000, "intel-rapl:1:1": 20_000}, 10, 11, 10)
	// 11 ends, 12 appears; the intensity has changed.
	n.cpu(200, 200)
	n.process(10, 1000, 620+100)
	n.process(12, 1200, 40)
	if err := os.RemoveAll(filepath.Join(n.proc, "11")); err != nil {
		t.Fatal(err)
	}
	pass(f710, 710_000, map[string]uint64{"intel-rapl:0": 80_000, "intel-rapl:0:1": 30_001, "intel-rapl:1": 7_777, "intel-rapl:1:1": 1}, 10, 12)
	n.cpu(100, 300)
	n.process(10, 1000, 720+30)
	n.process(12, 1200, 40+50)
	pass(f710, 710_000, map[string]uint64{"intel-rapl:0": 90_000, "intel-rapl:0:1": 12_345, "intel-rapl:1": 60_000, "intel-rapl:1:1": 5_000}, 10, 12)
	// An unreadable /proc/stat: every domain's energy is the rest's.
	if err := os.Rename(filepath.Join(n.proc, "stat"), filepath.Join(n.proc, "stat.off")); err != nil {
		t.Fatal(err)
	}
	pass(f52, 52_000, map[string]uint64{"intel-rapl:0": 70_000, "intel-rapl:0:1": 7_000, "intel-rapl:1": 700, "intel-rapl:1:1": 70}, 10, 12)

	p11 := hostshare.Process{Pid: 11, StartTime: 1100}
	var p11UG uint64
	for i, z := range zones {
		tt := h.Totals(i)
		sum := tt.RestUG + tt.ExitedUG
		for p, ug := range tt.ProcessesUG {
			sum += ug
			if d := math.Abs(float64(ug) - exact[z][p.Pid]); d > 4 {
				t.Errorf("%s: process %d %d µg, exact %.2f", z, p.Pid, ug, exact[z][p.Pid])
			}
		}
		if sum != want[z] {
			t.Errorf("%s: Σ process + rest = %d µg, want %d", z, sum, want[z])
		}
		if i == 0 {
			p11UG = tt.ProcessesUG[p11]
		}
	}
	if want["intel-rapl:0"] < 10_000 || p11UG == 0 {
		t.Fatalf("package-0: %d µg in all, process 11 %d: too little to test", want["intel-rapl:0"], p11UG)
	}
	checkExport(t, h, want)
	// 11's series has ended: its emissions are the exited series', with
	// its energy.
	if tt := h.Totals(0); tt.ExitedUG != p11UG || tt.ProcessesUG[p11] != 0 {
		t.Errorf("exited %d µg, want process 11's %d", tt.ExitedUG, p11UG)
	}
	checkExport(t, h, want)
}

// TestPassCo2eOff: a pass without Emissions converts nothing, and an
// export without the emissions instruments exports none.
func TestPassCo2eOff(t *testing.T) {
	n := newNode(t)
	n.process(10, 1000, 0)
	h, _ := n.open(t)
	h.Pass(procs(10), nil)
	n.cpu(100, 100)
	n.process(10, 1000, 50)
	n.addEnergy("intel-rapl:0", 1000)
	n.addEnergy("intel-rapl:2", 3000)
	h.Pass(procs(10), nil)
	if tt := h.Totals(0); tt.EnergyMJ != 1000 || tt.RestUG != 0 || tt.ProcessesUG[hostshare.Process{Pid: 10, StartTime: 1000}] != 0 {
		t.Fatalf("without emissions: %+v", tt)
	}
	checkExport(t, h, nil)
}
