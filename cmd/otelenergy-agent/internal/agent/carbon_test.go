package agent_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/hostshare"
	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/cputime"
	"github.com/otelenergy/otelenergy/internal/fakesysfs"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/procfs"
)

// switchReader is an intensity the test changes between passes.
type switchReader struct {
	r atomic.Pointer[carbon.Reading]
}

func (s *switchReader) Current() *carbon.Reading { return s.r.Load() }
func (s *switchReader) set(mg uint64) {
	s.r.Store(&carbon.Reading{Intensity: carbon.Intensity{MgPerKWh: mg, Kind: carbon.Average, Source: "test"}})
}

// notingRings is fakeRings with the Monitor's Clock: the ring's time now
// is its newest step plus lead (negative: steps stamped after the clock
// was read, as a sampler's push racing a pass).
type notingRings struct {
	*fakeRings
	lead  int64
	noted []int64 // every Clock reading: where the agent notes the timeline
}

func (c *notingRings) Clock() (int64, time.Time) {
	t := c.t + c.lead
	c.noted = append(c.noted, t)
	return t, time.Unix(0, t)
}

// fixedProcs lists three processes, always, at 10, 30 and 60 % SM, or,
// with unmeasured, on a board without per-process utilization at
// weights 1, 2 and 4.
type fixedProcs struct{ unmeasured bool }

func (f fixedProcs) Read(_ int, b *nvmlsource.BoardProcesses) error {
	b.Reset()
	for k, sm := range []uint64{10, 30, 60} {
		p := nvmlsource.ProcessUsage{Pid: uint32(11 + k), Listed: true, SmUtil: sm, Samples: 1}
		if f.unmeasured {
			p.SmUtil, p.Samples, p.Weight = 0, 0, 1<<k
		}
		b.Processes = append(b.Processes, p)
	}
	if f.unmeasured {
		b.Utilization = nvmlsource.UtilUnsupported
	}
	return nil
}

// co2e reads every otelenergy.process.co2e series and
// otelenergy.co2e.unattributed, in µg, per process pid (0: the
// aggregate series), and the intensity gauge with its attributes.
type co2eExport struct {
	procs     map[int64]uint64
	rest      uint64
	intensity float64
	attrs     attribute.Set
	hasAge    bool
}

func collectCo2e(t *testing.T, reader *sdkmetric.ManualReader) co2eExport {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	ug := func(g float64) uint64 { return uint64(math.Round(g * 1e6)) }
	x := co2eExport{procs: map[int64]uint64{}}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "otelenergy.process.co2e":
				for _, dp := range m.Data.(metricdata.Sum[float64]).DataPoints {
					pid, _ := dp.Attributes.Value("process.pid")
					x.procs[pid.AsInt64()] += ug(dp.Value)
				}
			case "otelenergy.co2e.unattributed":
				x.rest += ug(m.Data.(metricdata.Sum[float64]).DataPoints[0].Value)
			case "otelenergy.carbon.intensity":
				dp := m.Data.(metricdata.Gauge[float64]).DataPoints[0]
				x.intensity, x.attrs = dp.Value, dp.Attributes
			case "otelenergy.carbon.intensity.age":
				x.hasAge = true
			}
		}
	}
	return x
}

// step is one counter interval the test pushed.
type co2eStep struct {
	t0, t1 int64
	mj     uint64
	pass   int
}

// TestProcessCo2eIntegratesChange runs three processes for 10 passes of
// ten 100 ms intervals each, at 52 g/kWh and then 710 g/kWh from the
// pass that first sees the change, at a PUE of 1.135 and 36 g of
// embodied emissions per device-hour (1,000 µg per interval). Every
// interval is converted at the reading noted at or before its end, so
//
//	Σ process µg + unattributed µg = Σ intervals round(E × I × PUE) + 1,000 per interval,
//
// exactly, and each process's figure is within 2 µg per interval of its
// own energy at the intensity of each interval plus its third of the
// embodied emissions.
func TestProcessCo2eIntegratesChange(t *testing.T) {
	rings := &notingRings{fakeRings: newFakeRings(t), lead: int64(time.Millisecond)}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	var intensity switchReader
	intensity.set(52_000)
	pue, _ := carbon.ParsePUE("1.135")
	emb, _ := carbon.ParseGramsPerHour("36")
	model, err := carbon.NewModel(&intensity, carbon.WithPUE(pue), carbon.WithEmbodied(emb))
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.Config{Rings: rings, Lister: fixedProcs{}, Resolver: anyProc{}, IdleWatts: 50, SampleHold: -1,
		MeterProvider: mp, Carbon: model})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	type note struct {
		t  int64
		mg uint64
	}
	notes := []note{{rings.noted[0], 52_000}} // New notes the reading
	var steps []co2eStep
	perPass := map[uint32][]uint64{} // each process's mJ, per pass
	prev := map[uint32]uint64{}
	for pass := range 10 {
		if pass == 5 {
			intensity.set(710_000)
		}
		for k := range 10 {
			mj := 9_000 + uint64(pass*10+k)*37 // 90 W and up
			rings.push(mj)
			steps = append(steps, co2eStep{rings.t - 100e6, rings.t, mj, pass})
		}
		n := len(rings.noted)
		ag.Pass()
		if len(rings.noted) == n {
			t.Fatal("the pass read no clock")
		}
		notes = append(notes, note{rings.noted[n], intensity.Current().MgPerKWh})
		tot := ag.Totals(0)
		for p, mj := range tot.Processes {
			perPass[p.Pid] = append(perPass[p.Pid], mj-prev[p.Pid])
			prev[p.Pid] = mj
		}
	}
	// The reading of each interval: the last noted at or before its end.
	at := func(t1 int64) uint64 {
		mg := notes[0].mg
		for _, n := range notes {
			if n.t <= t1 {
				mg = n.mg
			}
		}
		return mg
	}
	var want, all52, all710 uint64
	passMg := make([]uint64, 10)
	for _, s := range steps {
		f, _ := carbon.NewFactor(at(s.t1), pue)
		want += f.Of(s.mj) + 1000
		passMg[s.pass] = at(s.t1)
		f52, _ := carbon.NewFactor(52_000, pue)
		f710, _ := carbon.NewFactor(710_000, pue)
		all52 += f52.Of(s.mj) + 1000
		all710 += f710.Of(s.mj) + 1000
	}
	// The change was seen at the start of pass 5's Pass, after its steps:
	// passes 0-5 at 52, 6-9 at 710.
	if passMg[5] != 52_000 || passMg[6] != 710_000 {
		t.Fatalf("readings by pass %v", passMg)
	}
	x := collectCo2e(t, reader)
	var got uint64
	for _, ug := range x.procs {
		got += ug
	}
	got += x.rest
	if got != want {
		t.Fatalf("Σ process %v + unattributed %d = %d µg, want %d (all at 52: %d, all at 710: %d)", x.procs, x.rest, got, want, all52, all710)
	}
	t.Logf("Σ process + unattributed = %d µg, exactly the integration (all at 52 g/kWh: %d, all at 710: %d)", got, all52, all710)
	for pid, mjs := range perPass {
		var exact float64
		for pass, mj := range mjs {
			exact += float64(mj) * float64(passMg[pass]) * pue.Float() / 3.6e6 // mJ × mg/kWh × 1000 µg/mg / 3.6e9 mJ/kWh
		}
		exact += 100 * 1000.0 / 3 // a third of each interval's 1,000 µg
		if d := math.Abs(float64(x.procs[int64(pid)]) - exact); d > 2*100 {
			t.Errorf("pid %d: %d µg, want %.1f within 200", pid, x.procs[int64(pid)], exact)
		}
	}
	if x.intensity != 710 || x.attrs.Len() != 2 || !x.attrs.HasValue(agent.CarbonSourceKey) || !x.attrs.HasValue(agent.CarbonKindKey) {
		t.Fatalf("intensity gauge %v %v", x.intensity, x.attrs.ToSlice())
	}
	if x.hasAge {
		t.Fatal("an age without an age function")
	}
}

// TestWindowCo2eRuns: on a board without per-process utilization the
// window's intervals are split and converted together, in runs of one
// reading: with the clock 250 ms behind the ring's newest step, a
// change noted at a pass falls inside the next window, which is split
// in two runs, each converted at its own reading, and the totals are
// exact per run.
func TestWindowCo2eRuns(t *testing.T) {
	rings := &notingRings{fakeRings: newFakeRings(t), lead: -250 * int64(time.Millisecond)}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	var intensity switchReader
	intensity.set(300_000)
	model, err := carbon.NewModel(&intensity)
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.Config{Rings: rings, Lister: fixedProcs{unmeasured: true}, Resolver: anyProc{}, IdleWatts: 20, SampleHold: -1,
		MeterProvider: mp, Carbon: model, CarbonAge: func() (time.Duration, bool) { return 42 * time.Second, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	type note struct {
		t  int64
		mg uint64
	}
	notes := []note{{rings.noted[0], 300_000}}
	var steps []co2eStep
	var energy uint64
	for pass := range 6 {
		if pass == 3 {
			intensity.set(52_000)
		}
		for k := range 10 {
			mj := 7_000 + uint64(pass*10+k)*11
			rings.push(mj)
			energy += mj
			steps = append(steps, co2eStep{rings.t - 100e6, rings.t, mj, pass})
		}
		n := len(rings.noted)
		ag.Pass()
		notes = append(notes, note{rings.noted[n], intensity.Current().MgPerKWh})
	}
	at := func(t1 int64) uint64 {
		mg := notes[0].mg
		for _, n := range notes {
			if n.t <= t1 {
				mg = n.mg
			}
		}
		return mg
	}
	// Each pass's window converted in runs of equal readings.
	var want uint64
	runs := 0
	for pass := range 6 {
		var sum uint64
		var mg uint64
		for _, s := range steps {
			if s.pass != pass {
				continue
			}
			if sum > 0 && at(s.t1) != mg {
				f, _ := carbon.NewFactor(mg, carbon.PUENone)
				want += f.Of(sum)
				sum = 0
				runs++
			}
			mg = at(s.t1)
			sum += s.mj
		}
		f, _ := carbon.NewFactor(mg, carbon.PUENone)
		want += f.Of(sum)
		runs++
	}
	if runs != 7 {
		t.Fatalf("%d runs in 6 windows, want one window split in two: the test's clock does not straddle the change", runs)
	}
	x := collectCo2e(t, reader)
	var got uint64
	for _, ug := range x.procs {
		got += ug
	}
	if got+x.rest != want {
		t.Fatalf("Σ process %v + unattributed %d = %d µg, want %d", x.procs, x.rest, got+x.rest, want)
	}
	tot := ag.Totals(0)
	if tot.EnergyMJ != energy {
		t.Fatalf("energy %d, pushed %d", tot.EnergyMJ, energy)
	}
	// The processes share the active energy 1:2:4, so their emissions too,
	// within the rounding.
	if r := float64(x.procs[13]) / float64(x.procs[11]); math.Abs(r-4) > 0.01 {
		t.Errorf("weights 1:4, emissions %d:%d", x.procs[11], x.procs[13])
	}
	if x.intensity != 52 || !x.hasAge {
		t.Fatalf("intensity %v, age exported %v", x.intensity, x.hasAge)
	}
}

// TestCarbonOff: without a model the agent exports no emissions.
func TestCarbonOff(t *testing.T) {
	rings := newFakeRings(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ag, err := agent.New(agent.Config{Rings: rings, Lister: fixedProcs{}, Resolver: anyProc{}, IdleWatts: 50, SampleHold: -1, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	rings.push(10_000)
	ag.Pass()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "otelenergy.process.co2e", "otelenergy.co2e.unattributed", "otelenergy.carbon.intensity", "otelenergy.carbon.intensity.age":
				t.Errorf("%s exported with carbon off", m.Name)
			}
		}
	}
}

// TestCarbonPassCollectConcurrentSafe runs passes, collections and
// intensity changes at once, for the race detector.
func TestCarbonPassCollectConcurrentSafe(t *testing.T) {
	rings := newFakeRings(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	var intensity switchReader
	intensity.set(100_000)
	model, err := carbon.NewModel(&intensity, carbon.WithEmbodied(5_000_000))
	if err != nil {
		t.Fatal(err)
	}
	ch := &churn{n: 5}
	ag, err := agent.New(agent.Config{Rings: rings, Lister: ch, Resolver: ch, MeterProvider: mp, Carbon: model,
		CarbonAge: func() (time.Duration, bool) { return time.Second, true }})
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
		}
	})
	wg.Go(func() {
		for k := range 200 {
			intensity.set(uint64(50_000 + 1000*k))
		}
	})
	wg.Wait()
	if ag.Passes() != 200 {
		t.Fatalf("%d passes", ag.Passes())
	}
}

// hostRig is an agent over one GPU board and a two-socket RAPL host on a
// fake sysfs tree and a fake /proc, whose energy and CPU times the test
// sets pass by pass.
type hostRig struct {
	t      *testing.T
	sys    string
	proc   string
	rings  *notingRings
	host   *hostshare.Host
	ag     *agent.Agent
	reader *sdkmetric.ManualReader
	busy   uint64
	idle   uint64
	ticks  map[uint32]uint64
}

var raplZones = []string{"intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1", "intel-rapl:1:1"}

func newHostRig(t *testing.T, model *carbon.Model) *hostRig {
	t.Helper()
	r := &hostRig{t: t, sys: t.TempDir(), proc: t.TempDir(), busy: 1000, idle: 1000, ticks: map[uint32]uint64{10: 0, 11: 0}}
	if err := fakesysfs.Write(r.sys, filepath.FromSlash("../../../../internal/rapl/testdata/twosocket.tree")); err != nil {
		t.Fatal(err)
	}
	src, _, err := energysource.Host(energysource.WithSysfs(r.sys))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	fs := procfs.FS{Root: r.proc}
	var clock int64
	r.host, err = hostshare.New(hostshare.Config{Domains: src, CPU: &cputime.Trees{Root: fs.Root}, Now: func() int64 { clock += 1e9; return clock }})
	if err != nil {
		t.Fatal(err)
	}
	r.rings = &notingRings{fakeRings: newFakeRings(t), lead: int64(time.Millisecond)}
	r.reader = sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	r.ag, err = agent.New(agent.Config{Rings: r.rings, Lister: fixedList{10, 11}, Resolver: fs, IdleWatts: 50,
		MeterProvider: mp, SampleHold: -1, Host: r.host, Carbon: model})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.ag.Shutdown() })
	writeProc(t, r.proc, r.busy, r.idle, r.ticks)
	return r
}

// pass adds mj[zone] to each zone's counter (wrapping at its range),
// busy and idle ticks to the node and ticks[pid] to each process, ten
// 100 ms steps of 9 J to the board, and makes a pass.
func (r *hostRig) pass(mj map[string]uint64, busy, idle uint64, ticks map[uint32]uint64) {
	r.t.Helper()
	for zone, e := range mj {
		read := func(f string) uint64 {
			b, err := os.ReadFile(filepath.Join(r.sys, "class/powercap", zone, f))
			if err != nil {
				r.t.Fatal(err)
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				r.t.Fatal(err)
			}
			return v
		}
		v := (read("energy_uj") + e*1000) % (read("max_energy_range_uj") + 1)
		if err := fakesysfs.Set(r.sys, "class/powercap/"+zone+"/energy_uj", strconv.FormatUint(v, 10)); err != nil {
			r.t.Fatal(err)
		}
	}
	r.busy, r.idle = r.busy+busy, r.idle+idle
	for pid, tk := range ticks {
		r.ticks[pid] += tk
	}
	writeProc(r.t, r.proc, r.busy, r.idle, r.ticks)
	for range 10 {
		r.rings.push(9_000)
	}
	r.ag.Pass()
}

// sums reads every Sum the agent exports, per hw.id and metric name, in
// integer units of 1e-3 (mJ of J) or 1e-6 (µg of g), and the attribute
// sets of each process series per metric.
func (r *hostRig) sums() (map[string]map[string]uint64, map[string]map[attribute.Distinct]attribute.Set) {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	sums := map[string]map[string]uint64{}
	sets := map[string]map[attribute.Distinct]attribute.Set{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			s, ok := m.Data.(metricdata.Sum[float64])
			if !ok {
				continue
			}
			scale := 1e3
			if m.Unit == "g" {
				scale = 1e6
			}
			for _, dp := range s.DataPoints {
				id, _ := dp.Attributes.Value(semconv.HwIDKey)
				if sums[id.AsString()] == nil {
					sums[id.AsString()] = map[string]uint64{}
				}
				sums[id.AsString()][m.Name] += uint64(math.Round(dp.Value * scale))
				if m.Name == "otelenergy.process.energy" || m.Name == "otelenergy.process.co2e" {
					if sets[m.Name] == nil {
						sets[m.Name] = map[attribute.Distinct]attribute.Set{}
					}
					sets[m.Name][dp.Attributes.Equivalent()] = dp.Attributes
				}
			}
		}
	}
	return sums, sets
}

// TestHostCo2eIntegratesChange runs two GPU processes' CPU and DRAM
// energy on a two-socket host through five passes, at 52 g/kWh and then
// 710 g/kWh, at a PUE of 1.135 and 36 g of embodied emissions per
// device-hour. The change is noted by pass 2's Pass, after the energy of
// its interval was metered: that energy is at 52, the board's steps of
// the same span included, and passes 3 and 4 at 710. It checks through a
// real SDK reader, per RAPL domain's hw.id,
//
//	Σ otelenergy.process.co2e + otelenergy.co2e.unattributed = Σ passes round(E × I × PUE),
//
// exactly in µg, with no embodied emissions on a domain; each process's
// figure within 5 µg (1 a pass) of its energy at each pass's intensity;
// its series the attributes of its otelenergy.process.energy series; and
// the board's identity, with its embodied emissions, changing intensity
// at the same pass.
func TestHostCo2eIntegratesChange(t *testing.T) {
	var intensity switchReader
	intensity.set(52_000)
	pue, _ := carbon.ParsePUE("1.135")
	emb, _ := carbon.ParseGramsPerHour("36")
	model, err := carbon.NewModel(&intensity, carbon.WithPUE(pue), carbon.WithEmbodied(emb))
	if err != nil {
		t.Fatal(err)
	}
	r := newHostRig(t, model)
	r.ag.Pass() // baselines
	want := map[string]uint64{}
	var all52, all710 uint64
	exact := map[string]map[hostshare.Process]float64{}
	prev := make([]hostshare.Totals, len(raplZones))
	for i := range raplZones {
		prev[i] = r.ag.HostTotals(i)
	}
	for pass := range 5 {
		mg := intensity.Current().MgPerKWh // in force over the pass's interval
		if pass == 2 {
			intensity.set(710_000) // noted by pass 2's Pass, after its interval
		}
		f, _ := carbon.NewFactor(mg, pue)
		f52, _ := carbon.NewFactor(52_000, pue)
		f710, _ := carbon.NewFactor(710_000, pue)
		k := uint64(pass)
		r.pass(map[string]uint64{"intel-rapl:0": 40_000 + 1_111*k, "intel-rapl:0:1": 7_000 + 333*k,
			"intel-rapl:1": 30_000 + 777*k, "intel-rapl:1:1": 5_000 + 7*k},
			200+10*k, 200-10*k, map[uint32]uint64{10: 60 + 3*k, 11: 25 + 5*k})
		for i, z := range raplZones {
			tt := r.ag.HostTotals(i)
			e := tt.EnergyMJ - prev[i].EnergyMJ
			want[z] += f.Of(e)
			all52 += f52.Of(e)
			all710 += f710.Of(e)
			if exact[z] == nil {
				exact[z] = map[hostshare.Process]float64{}
			}
			for p, mj := range tt.Processes {
				exact[z][p] += float64(mj-prev[i].Processes[p]) * float64(mg) * pue.Float() / 3.6e6
			}
			prev[i] = tt
		}
	}
	sums, sets := r.sums()
	var got uint64
	for i, z := range raplZones {
		s := sums[z]
		if s["hw.energy"] == 0 {
			t.Fatalf("%s: no energy", z)
		}
		ug := s["otelenergy.process.co2e"] + s["otelenergy.co2e.unattributed"]
		got += ug
		if ug != want[z] {
			t.Errorf("%s: Σ process.co2e %d + co2e.unattributed %d = %d µg, want %d", z,
				s["otelenergy.process.co2e"], s["otelenergy.co2e.unattributed"], ug, want[z])
		}
		tt := r.ag.HostTotals(i)
		for p, ug := range tt.ProcessesUG {
			if d := math.Abs(float64(ug) - exact[z][p]); d > 5 {
				t.Errorf("%s: process %d %d µg, exact %.2f", z, p.Pid, ug, exact[z][p])
			}
			if ug == 0 {
				t.Errorf("%s: process %d has no emissions", z, p.Pid)
			}
		}
	}
	t.Logf("RAPL domains: Σ process + unattributed = %d µg, exactly the integration (all at 52 g/kWh: %d, all at 710: %d)", got, all52, all710)
	if got == all52 || got == all710 {
		t.Fatal("the change made no difference")
	}
	// Every process.co2e series is a process.energy series: 2 processes on
	// the board and on each of the 4 domains, and each domain's exited
	// series, and the board's exited and overflow ones.
	for d, s := range sets["otelenergy.process.co2e"] {
		if _, ok := sets["otelenergy.process.energy"][d]; !ok {
			t.Errorf("process.co2e %v has no process.energy series", s.ToSlice())
		}
	}
	if n, m := len(sets["otelenergy.process.co2e"]), len(sets["otelenergy.process.energy"]); n != m || n != 2+2*4+4+2 {
		t.Errorf("%d process.co2e series, %d process.energy series, want 16 of each", n, m)
	}
	// The board keeps its embodied emissions: 36 g/h is 1,000 µg per
	// 100 ms interval, above its operational figure.
	g := sums["GPU-0"]
	var boardWant uint64
	f52, _ := carbon.NewFactor(52_000, pue)
	f710, _ := carbon.NewFactor(710_000, pue)
	for pass := range 5 {
		f := f52
		if pass >= 3 {
			f = f710
		}
		boardWant += 10 * (f.Of(9_000) + 1000)
	}
	if ug := g["otelenergy.process.co2e"] + g["otelenergy.co2e.unattributed"]; ug != boardWant {
		t.Errorf("GPU-0: %d µg, want %d", ug, boardWant)
	}
}

// TestHostCarbonOff: with a host and carbon off, no emissions series.
func TestHostCarbonOff(t *testing.T) {
	r := newHostRig(t, nil)
	r.ag.Pass()
	r.pass(map[string]uint64{"intel-rapl:0": 40_000}, 200, 200, map[uint32]uint64{10: 60, 11: 20})
	sums, _ := r.sums()
	if sums["intel-rapl:0"]["otelenergy.process.energy"] == 0 {
		t.Fatal("no process energy on package-0")
	}
	for id, s := range sums {
		for name := range s {
			if strings.Contains(name, "co2e") {
				t.Errorf("%s: %s exported with carbon off", id, name)
			}
		}
	}
}

// TestHostCarbonPassCollectConcurrentSafe runs passes over a GPU board
// and a RAPL host with carbon on, collections and intensity changes at
// once, for the race detector.
func TestHostCarbonPassCollectConcurrentSafe(t *testing.T) {
	var intensity switchReader
	intensity.set(100_000)
	model, err := carbon.NewModel(&intensity, carbon.WithEmbodied(5_000_000))
	if err != nil {
		t.Fatal(err)
	}
	r := newHostRig(t, model)
	var wg sync.WaitGroup
	wg.Go(func() {
		for k := range 50 {
			r.pass(map[string]uint64{"intel-rapl:0": 1000, "intel-rapl:1:1": 300}, 100, 100, map[uint32]uint64{10: uint64(k % 7), 11: 3})
			_ = r.ag.HostTotals(0)
		}
	})
	wg.Go(func() {
		for range 50 {
			var rm metricdata.ResourceMetrics
			if err := r.reader.Collect(context.Background(), &rm); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() {
		for k := range 200 {
			intensity.set(uint64(50_000 + 1000*k))
		}
	})
	wg.Wait()
	if r.ag.Passes() != 50 {
		t.Fatalf("%d passes", r.ag.Passes())
	}
}
