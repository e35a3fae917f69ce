//go:build cgo && linux

package agent_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/procfs"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// The script's physics: the counter steps every 100 ms; each board draws
// 100 W of static power (10 J a step) plus, for each process, 3 W per
// percent of SM utilization (30 mJ a step per percent), plus work no SM
// sample shows (extra). A window is ten steps, one pass.
const (
	stepsPerWindow = 10
	staticMJ       = 10_000
	mJPerUtilStep  = 30
	windows        = 8
	step           = 100 * time.Millisecond
)

type sproc struct {
	pid      uint32
	start    uint64
	name     string
	util     uint32
	from, to int // windows [from, to) in which it is listed
	// sampledTill extends its samples past its listing: it used the
	// board, then exited before the listing.
	sampledTill int
	instance    int
}

func (p sproc) listed(w int) bool { return w >= p.from && w < p.to }
func (p sproc) sampled(w int) bool {
	return p.listed(w) || (w >= p.to && w < p.sampledTill)
}

// migSlices are the MIG board's instances' compute slices; the last
// instance's listing fails.
var migSlices = []uint32{1, 3, 4}

type boardScript struct {
	procs       []sproc
	extra       func(w int) uint64 // mJ per step not seen in SM samples
	notFound    func(w int) bool   // GetProcessUtilization answers NOT_FOUND
	mig         bool
	unsupported bool // GetProcessUtilization NOT_SUPPORTED (vGPU)
	lostAt      int  // from this window on, every call answers GPU_IS_LOST; 0 never
	stale       bool // every answer also carries a stale sample at 90 %
	resetAt     int  // the counter restarts from 0 at this window's first step (a GPU reset); 0 never
}

func never(int) bool { return false }

// script is the eight boards' ground truth. The tracker charges a reset's
// first reading in full, so the truth ignores the reset.
func script() []boardScript {
	none := func(int) uint64 { return 0 }
	return []boardScript{
		// Two steady processes; each answer also repeats an old sample.
		{procs: []sproc{{pid: 100, start: 1, name: "vllm", util: 60, to: windows}, {pid: 101, start: 1, name: "embed", util: 40, to: windows}}, extra: none, notFound: never, stale: true},
		// A process appears in window 3, leaves the listing after window
		// 5, and its last sample arrives in window 6.
		{procs: []sproc{{pid: 110, start: 1, name: "trainer", util: 50, to: windows}, {pid: 111, start: 5, name: "eval", util: 25, from: 3, to: 6, sampledTill: 7}}, extra: none, notFound: never},
		// NOT_FOUND in windows 2 and 3, while the board draws 50 W more.
		{procs: []sproc{{pid: 120, start: 1, name: "notebook", util: 100, to: windows}}, extra: func(w int) uint64 {
			if w == 2 || w == 3 {
				return 5000
			}
			return 0
		}, notFound: func(w int) bool { return w == 2 || w == 3 }},
		// MIG: a 1g and a 3g instance, one process each, and a 4g one whose
		// listing fails; 20 W of work split by compute slices, the failed
		// instance's half unattributed.
		{procs: []sproc{{pid: 130, start: 1, name: "mig-a", to: windows}, {pid: 131, start: 1, name: "mig-b", to: windows, instance: 1}}, extra: func(int) uint64 { return 2000 }, notFound: never, mig: true},
		// vGPU-like: no per-process utilization, three processes, 30 W.
		{procs: []sproc{{pid: 140, start: 1, name: "a", to: windows}, {pid: 141, start: 1, name: "b", to: windows}, {pid: 142, start: 1, name: "c", to: windows}}, extra: func(int) uint64 { return 3000 }, notFound: never, unsupported: true},
		// Lost from window 4 on.
		{procs: []sproc{{pid: 150, start: 1, name: "p", util: 70, to: windows}, {pid: 151, start: 1, name: "q", util: 30, to: windows}}, extra: none, notFound: never, lostAt: 4},
		// No process at all, 10 W of activity; a GPU reset in window 5
		// restarts the counter from zero.
		{extra: func(int) uint64 { return 1000 }, notFound: never, resetAt: 5},
		// pid 170 is reused: one process in windows 0-2, another from 4.
		{procs: []sproc{{pid: 170, start: 11, name: "first", util: 100, to: 3}, {pid: 170, start: 22, name: "second", util: 100, from: 4, to: windows}}, extra: none, notFound: never},
	}
}

// world is the mocked node at window w.
type world struct {
	mu     sync.Mutex
	w      int // the window in progress
	energy [8]uint64
	sc     []boardScript
}

func (wd *world) stepEnergy(b int) uint64 {
	s := wd.sc[b]
	e := uint64(staticMJ) + s.extra(wd.w)
	if !s.mig && !s.unsupported && !s.notFound(wd.w) {
		for _, p := range s.procs {
			if p.sampled(wd.w) {
				e += uint64(p.util) * mJPerUtilStep
			}
		}
	}
	return e
}

func (wd *world) lost(b int) bool {
	return wd.sc[b].lostAt > 0 && wd.w >= wd.sc[b].lostAt
}

func (wd *world) list(b int, instance int) ([]nvml.ProcessInfo, nvml.Return) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.lost(b) {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	var out []nvml.ProcessInfo
	for _, p := range wd.sc[b].procs {
		if p.listed(wd.w) && (instance < 0 || p.instance == instance) {
			out = append(out, nvml.ProcessInfo{Pid: p.pid})
		}
	}
	return out, nvml.SUCCESS
}

// samples answers GetProcessUtilization: one sample per sampled process
// per window, stamped at the window's end, newer than last.
func (wd *world) samples(b int, last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	s := wd.sc[b]
	switch {
	case wd.lost(b):
		return nil, nvml.ERROR_GPU_IS_LOST
	case s.unsupported:
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	var out []nvml.ProcessUtilizationSample
	for w := 0; w <= wd.w; w++ {
		ts := uint64(w+1) * 1_000_000
		if ts <= last || s.notFound(w) {
			continue
		}
		for _, p := range s.procs {
			if p.sampled(w) {
				out = append(out, nvml.ProcessUtilizationSample{Pid: p.pid, TimeStamp: ts, SmUtil: p.util})
			}
		}
	}
	if s.stale && last > 0 {
		out = append(out, nvml.ProcessUtilizationSample{Pid: s.procs[1].pid, TimeStamp: last, SmUtil: 90})
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

// resolve is the node's /proc.
func (wd *world) proc(pid uint32) (sproc, bool) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	for _, s := range wd.sc {
		for _, p := range s.procs {
			if p.pid == pid && p.listed(wd.w) {
				return p, true
			}
		}
	}
	return sproc{}, false
}

func (wd *world) StartTime(pid uint32) (uint64, error) {
	p, ok := wd.proc(pid)
	if !ok {
		return 0, procfs.ErrGone
	}
	return p.start, nil
}

func (wd *world) Info(pid uint32) (procfs.Info, error) {
	p, ok := wd.proc(pid)
	if !ok {
		return procfs.Info{}, procfs.ErrGone
	}
	return procfs.Info{StartTime: p.start, Name: p.name, ContainerID: fmt.Sprintf("%064x", pid)}, nil
}

func mockNode(t *testing.T, wd *world) *server.Server {
	t.Helper()
	srv := dgxh100.New()
	for b, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
			wd.mu.Lock()
			defer wd.mu.Unlock()
			if wd.lost(b) {
				return 0, nvml.ERROR_GPU_IS_LOST
			}
			return wd.energy[b], nvml.SUCCESS
		}
		dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
		dev.GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) { return 200_000, 700_000, nvml.SUCCESS }
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			if wd.sc[b].mig {
				return nil, nvml.ERROR_NO_PERMISSION // the parent lists nothing to an unprivileged caller
			}
			return wd.list(b, -1)
		}
		dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		dev.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			if wd.sc[b].mig {
				return nil, nvml.ERROR_NOT_SUPPORTED
			}
			return wd.samples(b, last)
		}
		if wd.sc[b].mig {
			dev.MigMode = nvml.DEVICE_MIG_ENABLE
			migs := make([]*mock.Device, 3)
			for k := range migs {
				migs[k] = &mock.Device{
					GetUUIDFunc: func() (string, nvml.Return) { return fmt.Sprintf("MIG-%d-%d", b, k), nvml.SUCCESS },
					GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
						return nvml.DeviceAttributes{ComputeInstanceSliceCount: migSlices[k]}, nvml.SUCCESS
					},
					GetGpuInstanceIdFunc: func() (int, nvml.Return) { return k + 1, nvml.SUCCESS },
					GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
						if k == 2 {
							return nil, nvml.ERROR_UNKNOWN
						}
						return wd.list(b, k)
					},
				}
			}
			dev.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{}, nvml.ERROR_NOT_SUPPORTED }
			dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
			dev.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
				if j < len(migs) {
					return migs[j], nvml.SUCCESS
				}
				return nil, nvml.ERROR_NOT_FOUND
			}
		}
	}
	return srv
}

// collected is one collection's values of the agent's instruments.
type collected map[string]map[string]float64 // metric -> attribute set -> value

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != agent.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			s, ok := m.Data.(metricdata.Sum[float64])
			if !ok {
				continue
			}
			vals := map[string]float64{}
			for _, dp := range s.DataPoints {
				vals[dp.Attributes.Encoded(attribute.DefaultEncoder())] = dp.Value
			}
			out[m.Name] = vals
		}
	}
	return out
}

// byBoard sums a metric's values per hw.id.
func (c collected) byBoard(metric string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range c[metric] {
		out[hwID(k)] += v
	}
	return out
}

func hwID(encoded string) string {
	for _, kv := range splitEncoded(encoded) {
		if kv[0] == "hw.id" {
			return kv[1]
		}
	}
	return ""
}

func splitEncoded(s string) [][2]string {
	var out [][2]string
	for _, part := range splitComma(s) {
		for i := 0; i < len(part); i++ {
			if part[i] == '=' {
				out = append(out, [2]string{part[:i], part[i+1:]})
				break
			}
		}
	}
	return out
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// TestMockNode runs the agent on go-nvml's fake DGX H100 through the
// script above and checks every board's idle, unattributed and
// per-process totals against the script's physics, and that every
// collection conserves each board's energy.
func TestMockNode(t *testing.T) {
	wd := &world{sc: script()}
	srv := mockNode(t, wd)
	src, err := nvmlsource.New(nvmlsource.WithInterface(srv), nvmlsource.WithDevices("0", "1", "2", "3", "4", "5", "6", "7"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		clockMu sync.Mutex
		now     = time.Unix(1_700_000_000, 0)
	)
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	mon, rings, err := agent.NewMonitor(src, otelenergy.WithClock(clock), otelenergy.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Shutdown(context.Background())
	// The samples' timestamps count from zero, on no clock of the agent's:
	// each pass's samples describe its window. A board with no sample is
	// split at once.
	ag, err := agent.New(agent.Config{Rings: rings, Lister: src.NewProcessReader(), Resolver: wd, IdleWatts: 100, MeterProvider: mp,
		Now: clock, SampleHold: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()

	mon.Sample() // the anchor: each board's series starts here
	type key struct {
		board int
		pid   uint32
		start uint64
	}
	truthProc := map[key]uint64{}
	var truthIdle, truthUnattr, truthEnergy [8]uint64
	last := map[string]float64{} // the latest value of every process series
	var evalTotal float64
	for w := 0; w < windows; w++ {
		wd.mu.Lock()
		wd.w = w
		wd.mu.Unlock()
		for k := range stepsPerWindow {
			clockMu.Lock()
			now = now.Add(step)
			clockMu.Unlock()
			wd.mu.Lock()
			for b := range wd.energy {
				if wd.sc[b].resetAt == w && w > 0 && k == 0 {
					wd.energy[b] = 0
				}
				if !wd.lost(b) {
					wd.energy[b] += wd.stepEnergy(b)
				}
			}
			wd.mu.Unlock()
			mon.Sample()
		}
		ag.Pass()

		// The script's truth for window w.
		for b, s := range wd.sc {
			if s.lostAt > 0 && w >= s.lostAt {
				continue
			}
			var active, util uint64
			wd.mu.Lock()
			e := wd.stepEnergy(b) * stepsPerWindow
			wd.mu.Unlock()
			truthEnergy[b] += e
			truthIdle[b] += staticMJ * stepsPerWindow
			active = e - staticMJ*stepsPerWindow
			var listed []sproc
			for _, p := range s.procs {
				if p.listed(w) {
					listed = append(listed, p)
				}
				if p.sampled(w) {
					util += uint64(p.util)
				}
			}
			switch {
			case s.mig:
				truthUnattr[b] += active * uint64(migSlices[2]) / 8
				for _, p := range listed {
					truthProc[key{b, p.pid, p.start}] += active * uint64(migSlices[p.instance]) / 8
				}
			case s.unsupported:
				if len(listed) == 0 {
					truthUnattr[b] += active
				}
				for _, p := range listed {
					truthProc[key{b, p.pid, p.start}] += active / uint64(len(listed))
				}
			case s.notFound(w) || util == 0:
				truthUnattr[b] += active
			default:
				for _, p := range s.procs {
					if p.sampled(w) {
						truthProc[key{b, p.pid, p.start}] += uint64(p.util) * mJPerUtilStep * stepsPerWindow
					}
				}
			}
		}

		c := collect(t, reader)
		energy := c.byBoard("hw.energy")
		parts := map[string]float64{}
		for _, m := range []string{"otelenergy.process.energy", "otelenergy.energy.idle", "otelenergy.energy.unattributed"} {
			for id, v := range c.byBoard(m) {
				parts[id] += v
			}
		}
		for id, e := range energy {
			if mj, pmj := int64(e*1000+0.5), int64(parts[id]*1000+0.5); mj != pmj {
				t.Fatalf("window %d, %s: Σ parts %d mJ, hw.energy %d mJ", w, id, pmj, mj)
			}
		}
		for k, v := range c["otelenergy.process.energy"] {
			last[k] = v
		}
		// The eval process (board 1, pid 111) leaves the listing after
		// window 5: window 6's export shows its final total, window 7's
		// no longer has its series, and the exited series holds it.
		evalKey := ""
		for k := range c["otelenergy.process.energy"] {
			if contains(k, "process.pid=111") {
				evalKey = k
			}
		}
		switch w {
		case 6:
			if evalKey == "" {
				t.Fatal("window 6: the exited process's series is gone before its last export")
			}
			evalTotal = c["otelenergy.process.energy"][evalKey]
		case 7:
			if evalKey != "" {
				t.Fatal("window 7: the exited process's series outlived its last export")
			}
			exited := 0.0
			for k, v := range c["otelenergy.process.energy"] {
				if hwID(k) == mon.Devices()[1].ID && contains(k, "otelenergy.process.exited=true") {
					exited = v
				}
			}
			if exited != evalTotal {
				t.Fatalf("board 1's exited series holds %v J, want the exited process's %v J", exited, evalTotal)
			}
		}
	}

	devs := mon.Devices()
	if st := mon.Stats(); st.Devices[6].Resets != 1 || !st.Devices[5].Lost {
		t.Errorf("board 6 resets %d (want 1), board 5 lost %v (want true)", st.Devices[6].Resets, st.Devices[5].Lost)
	}
	for b := range wd.sc {
		tot := ag.Totals(b)
		if tot.EnergyMJ != truthEnergy[b] || tot.IdleMJ != truthIdle[b] || tot.UnattributedMJ != truthUnattr[b] {
			t.Errorf("board %d: energy %d idle %d unattributed %d; want %d %d %d", b,
				tot.EnergyMJ, tot.IdleMJ, tot.UnattributedMJ, truthEnergy[b], truthIdle[b], truthUnattr[b])
		}
		for k, want := range truthProc {
			if k.board != b {
				continue
			}
			got := -1.0
			for s, v := range last {
				if hwID(s) == devs[b].ID && contains(s, "process.pid="+strconv.Itoa(int(k.pid))) &&
					contains(s, "container.id="+fmt.Sprintf("%064x", k.pid)) && nameOf(s) == nameFor(wd.sc[b], k.pid, k.start) {
					got = v
				}
			}
			if int64(got*1000+0.5) != int64(want) {
				t.Errorf("board %d pid %d (start %d): %v J, want %d mJ", b, k.pid, k.start, got, want)
			}
		}
	}
	// MIG and vGPU shares are marked shared, and MIG ones name their
	// instance; measured ones are not marked.
	for s := range last {
		id := hwID(s)
		shared := contains(s, "otelenergy.energy.shared=true")
		isProc := contains(s, "process.pid=")
		switch {
		case !isProc:
		case id == devs[3].ID:
			if !shared || !contains(s, "otelenergy.gpu.instance=MIG-3-") {
				t.Errorf("MIG process series %s: want shared and its instance", s)
			}
		case id == devs[4].ID:
			if !shared {
				t.Errorf("vGPU process series %s: want shared", s)
			}
		case shared:
			t.Errorf("measured series %s is marked shared", s)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func nameOf(encoded string) string {
	for _, kv := range splitEncoded(encoded) {
		if kv[0] == "process.executable.name" {
			return kv[1]
		}
	}
	return ""
}

func nameFor(s boardScript, pid uint32, start uint64) string {
	for _, p := range s.procs {
		if p.pid == pid && p.start == start {
			return p.name
		}
	}
	return ""
}
