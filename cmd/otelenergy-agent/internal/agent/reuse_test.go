package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/procfs"
)

type lproc struct {
	pid   uint32
	start uint64
	sm    uint64
}

// scripted lists the processes the test sets, and is the node's /proc
// for them and for alive, processes that run without being listed.
type scripted struct {
	mu    sync.Mutex
	procs []lproc
	alive []lproc
	util  nvmlsource.Utilization
}

func (s *scripted) set(util nvmlsource.Utilization, procs ...lproc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.util, s.procs = util, procs
}

func (s *scripted) Read(_ int, b *nvmlsource.BoardProcesses) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.Reset()
	b.Utilization = s.util
	for _, p := range s.procs {
		u := nvmlsource.ProcessUsage{Pid: p.pid, Listed: true}
		if s.util == nvmlsource.UtilMeasured {
			u.SmUtil, u.Samples = p.sm, 1
		}
		b.Processes = append(b.Processes, u)
	}
	return nil
}

func (s *scripted) find(pid uint32) (lproc, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range append(s.procs, s.alive...) {
		if p.pid == pid {
			return p, true
		}
	}
	return lproc{}, false
}

func (s *scripted) StartTime(pid uint32) (uint64, error) {
	p, ok := s.find(pid)
	if !ok {
		return 0, procfs.ErrGone
	}
	return p.start, nil
}

func (s *scripted) Info(pid uint32) (procfs.Info, error) {
	p, ok := s.find(pid)
	if !ok {
		return procfs.Info{}, procfs.ErrGone
	}
	return procfs.Info{StartTime: p.start, Name: "same-name", ContainerID: "same-container"}, nil
}

type rig struct {
	rings  *fakeRings
	lister *scripted
	reader *sdkmetric.ManualReader
	ag     *agent.Agent
	// max is the largest value each process series has exported.
	max map[attribute.Distinct]float64
}

func newRig(t *testing.T, maxSeries int, idleWatts float64) *rig {
	t.Helper()
	r := &rig{rings: newFakeRings(t), lister: &scripted{}, reader: sdkmetric.NewManualReader(), max: map[attribute.Distinct]float64{}}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	var err error
	r.ag, err = agent.New(agent.Config{Rings: r.rings, Lister: r.lister, Resolver: r.lister, MaxSeries: maxSeries, IdleWatts: idleWatts, MeterProvider: mp, SampleHold: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.ag.Shutdown() })
	return r
}

// pass pushes one second at watts and makes a pass.
func (r *rig) pass(watts uint64) {
	for range 10 {
		r.rings.push(watts * 100)
	}
	r.ag.Pass()
}

// export collects, checks that no process series went backwards, and
// returns the number of process series exported with a pid.
func (r *rig) export(t *testing.T) int {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "otelenergy.process.energy" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[float64]).DataPoints {
				if _, ok := dp.Attributes.Value("process.pid"); !ok {
					continue
				}
				n++
				if _, ok := dp.Attributes.Value("process.creation.time"); !ok {
					t.Errorf("series %v has no process.creation.time", dp.Attributes.ToSlice())
				}
				k := dp.Attributes.Equivalent()
				if dp.Value < r.max[k] {
					t.Fatalf("series %v went backwards: %v J after %v J", dp.Attributes.ToSlice(), dp.Value, r.max[k])
				}
				r.max[k] = dp.Value
			}
		}
	}
	return n
}

// TestPidReusedWithoutGap lists pid 7 for one process, then at once for
// another with the same name and container: two series, each with its own
// energy, and no exported counter goes backwards.
func TestPidReusedWithoutGap(t *testing.T) {
	r := newRig(t, 0, 50)
	for range 3 {
		r.lister.set(nvmlsource.UtilMeasured, lproc{7, 100, 50})
		r.pass(100)
		r.export(t)
	}
	for range 3 {
		r.lister.set(nvmlsource.UtilMeasured, lproc{7, 200, 50})
		r.pass(100)
		r.export(t)
	}
	tot := r.ag.Totals(0)
	live, exited := tot.Processes[agent.Process{Pid: 7, StartTime: 100}], tot.ExitedMJ
	if got := tot.Processes[agent.Process{Pid: 7, StartTime: 200}]; got != 3*50_000 {
		t.Errorf("the second process on pid 7: %d mJ, want 150000", got)
	}
	// The first one's series ended at the export after it was replaced;
	// its total moved to the exited series.
	if live != 0 || exited != 3*50_000 {
		t.Errorf("the first process: live %d mJ, exited series %d mJ; want 0 and 150000", live, exited)
	}
	if len(r.max) != 2 {
		t.Errorf("%d process series exported, want 2", len(r.max))
	}
}

// TestPidReusedAfterGap lists pid 7, misses it one pass, then lists a new
// process on it before any export: two series, not one.
func TestPidReusedAfterGap(t *testing.T) {
	r := newRig(t, 0, 50)
	r.lister.set(nvmlsource.UtilMeasured, lproc{7, 100, 50})
	r.pass(100)
	r.lister.set(nvmlsource.UtilMeasured)
	r.pass(50)
	r.lister.set(nvmlsource.UtilMeasured, lproc{7, 200, 50})
	r.pass(100)
	tot := r.ag.Totals(0)
	a, b := tot.Processes[agent.Process{Pid: 7, StartTime: 100}], tot.Processes[agent.Process{Pid: 7, StartTime: 200}]
	if a != 50_000 || b != 50_000 {
		t.Fatalf("pid 7's processes: %d and %d mJ, want 50000 each (%v)", a, b, tot.Processes)
	}
	if n := r.export(t); n != 2 {
		t.Fatalf("%d process series exported, want 2", n)
	}
}

// TestOverflowPidsDropped holds the cap with one long process and lists a
// steady overflow process beside 2,000 short-lived ones: the overflow pids
// tracked are those listed now, not every one ever seen.
func TestOverflowPidsDropped(t *testing.T) {
	r := newRig(t, 1, 50)
	next := uint32(1000)
	for range 1000 {
		r.lister.set(nvmlsource.UtilMeasured, lproc{1, 1, 10}, lproc{2, 1, 10}, lproc{next, 1, 10}, lproc{next + 1, 1, 10})
		next += 2
		r.pass(100)
	}
	tot := r.ag.Totals(0)
	if tot.OverflowPids != 3 {
		t.Fatalf("%d overflow pids tracked, want the 3 listed", tot.OverflowPids)
	}
	if len(tot.Processes) != 1 || tot.OverflowMJ == 0 {
		t.Fatalf("series %v, overflow %d mJ", tot.Processes, tot.OverflowMJ)
	}
}

// TestReusedPidLeavesOverflow fills the cap, puts pid 2 in overflow, then
// frees the cap and reuses pid 2 for a new process without a gap: the new
// process gets its own series.
func TestReusedPidLeavesOverflow(t *testing.T) {
	r := newRig(t, 1, 50)
	r.lister.set(nvmlsource.UtilMeasured, lproc{1, 1, 50}, lproc{2, 1, 50})
	r.pass(100)
	r.lister.set(nvmlsource.UtilMeasured, lproc{2, 1, 50})
	r.pass(100)
	r.export(t) // pid 1's series ends here: the cap has room
	r.lister.set(nvmlsource.UtilMeasured, lproc{2, 9, 50})
	r.pass(100)
	tot := r.ag.Totals(0)
	if got := tot.Processes[agent.Process{Pid: 2, StartTime: 9}]; got != 50_000 {
		t.Fatalf("the new process on pid 2: %d mJ in its own series, want 50000 (%v, overflow %d mJ)", got, tot.Processes, tot.OverflowMJ)
	}
	if tot.OverflowPids != 0 {
		t.Fatalf("%d overflow pids still tracked", tot.OverflowPids)
	}
}

// TestUnmeasuredBoardLearnsIdle runs a board without per-process
// utilization (a vGPU) with no process for 20 s at 60 W, then with two
// processes at 100 W: the static power learned while it listed nothing
// (60 W) stays idle, and the two share the other 40 W evenly.
func TestUnmeasuredBoardLearnsIdle(t *testing.T) {
	r := newRig(t, 0, 0)
	r.lister.set(nvmlsource.UtilUnsupported)
	for range 20 {
		r.pass(60)
	}
	before := r.ag.Totals(0)
	r.lister.set(nvmlsource.UtilUnsupported, lproc{1, 1, 0}, lproc{2, 1, 0})
	for range 5 {
		r.pass(100)
	}
	tot := r.ag.Totals(0)
	idle := tot.IdleMJ - before.IdleMJ
	if idle < 5*59_000 || idle > 5*61_000 {
		t.Fatalf("idle over the busy 5 s: %d mJ, want about 300000 (60 W learned while nothing ran)", idle)
	}
	for _, pid := range []uint32{1, 2} {
		if got := tot.Processes[agent.Process{Pid: pid, StartTime: 1}]; got < 5*19_000 || got > 5*21_000 {
			t.Errorf("pid %d: %d mJ, want about 100000 (20 W)", pid, got)
		}
	}
}

// TestListingGapKeepsLiveSeries lists pid 7, misses it for one pass with
// an export in between while the process still runs, then lists it again:
// one series, which never goes backwards and holds all its energy.
func TestListingGapKeepsLiveSeries(t *testing.T) {
	r := newRig(t, 0, 50)
	p := lproc{7, 100, 50}
	for range 3 {
		r.lister.set(nvmlsource.UtilMeasured, p)
		r.pass(100)
		r.export(t)
	}
	r.lister.set(nvmlsource.UtilMeasured)
	r.lister.alive = []lproc{p} // still in /proc, missing from the listing
	r.pass(100)
	r.export(t)
	r.lister.alive = nil
	r.lister.set(nvmlsource.UtilMeasured, p)
	r.pass(100)
	r.export(t)
	tot := r.ag.Totals(0)
	if got := tot.Processes[agent.Process{Pid: 7, StartTime: 100}]; got != 4*50_000 || tot.ExitedMJ != 0 {
		t.Fatalf("pid 7: %d mJ, exited series %d mJ; want 200000 and 0", got, tot.ExitedMJ)
	}
	if len(r.max) != 1 {
		t.Fatalf("%d process series exported, want 1", len(r.max))
	}
}

// TestOverflowPromotedWhenCapFrees holds the cap with pid 7, then reuses
// pid 7 at once for a new process: the new process waits in overflow only
// until the old series' last export frees the cap, then has its own.
func TestOverflowPromotedWhenCapFrees(t *testing.T) {
	r := newRig(t, 1, 50)
	r.lister.set(nvmlsource.UtilMeasured, lproc{7, 100, 50})
	r.pass(100)
	r.export(t)
	r.lister.set(nvmlsource.UtilMeasured, lproc{7, 200, 50})
	for range 5 {
		r.pass(100)
		r.export(t)
	}
	tot := r.ag.Totals(0)
	// The first pass after the reuse went to overflow (the cap was held by
	// the old series until its export); the other four are its own.
	if got := tot.Processes[agent.Process{Pid: 7, StartTime: 200}]; got != 4*50_000 || tot.OverflowMJ != 50_000 {
		t.Fatalf("the new process: %d mJ in its own series, %d mJ in overflow; want 200000 and 50000 (%v)", got, tot.OverflowMJ, tot.Processes)
	}
	if tot.OverflowPids != 0 {
		t.Fatalf("%d overflow pids still tracked", tot.OverflowPids)
	}
}

// booted is a scripted node that knows its boot time.
type booted struct {
	*scripted
	at time.Time
}

func (b booted) BootTime() (time.Time, error) { return b.at, nil }

// TestCreationTime lists a process that started three years and 10 ms
// after boot, past the 2.9 years where ticks times time.Second overflows:
// process.creation.time is the Resolver's boot time plus the start, to the
// tick.
func TestCreationTime(t *testing.T) {
	rings, lister := newFakeRings(t), &scripted{}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	boot := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
	ag, err := agent.New(agent.Config{Rings: rings, Lister: lister, Resolver: booted{lister, boot}, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	const threeYears = 3 * 365 * 86400
	lister.set(nvmlsource.UtilMeasured, lproc{7, threeYears*100 + 1, 50})
	rings.push(1000)
	ag.Pass()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := boot.Add(threeYears*time.Second + 10*time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00")
	var got []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "otelenergy.process.energy" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[float64]).DataPoints {
				if v, ok := dp.Attributes.Value("process.creation.time"); ok {
					got = append(got, v.AsString())
				}
			}
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("process.creation.time %q, want [%s]", got, want)
	}
}
