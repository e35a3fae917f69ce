//go:build cgo && linux

package nvmlsource_test

import (
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
)

func TestProcessReader(t *testing.T) {
	srv, devs := fakeH100(t, steady)
	d := devs[0]
	procs(d, 10, 11)
	d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 11}, {Pid: 12}}, nvml.SUCCESS // 11 twice: listed once
	}
	// The driver's buffer, answered by timestamp as NVML does, so that
	// the source's own share listing and this reader do not take each
	// other's samples. Once a reader has seen 200, the answer also repeats
	// the sample at 200, stale; pid 99 has a sample and is not listed.
	buffer := []nvml.ProcessUtilizationSample{sample(10, 100, 30), sample(10, 200, 50), sample(12, 150, 20), sample(11, 300, 40), sample(99, 250, 70)}
	var (
		mu    sync.Mutex
		calls []uint64
		round int
	)
	d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, last)
		var out []nvml.ProcessUtilizationSample
		for _, smp := range buffer {
			// The reader's first read sees samples up to 200, its second
			// the rest.
			if smp.TimeStamp > last && (round > 0 || smp.TimeStamp <= 200) {
				out = append(out, smp)
			}
		}
		if last >= 200 {
			out = append(out, sample(10, 200, 50))
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	s := newSource(t, srv, nvmlsource.WithDevices("0"))
	r := s.NewProcessReader()
	var b nvmlsource.BoardProcesses

	if err := r.Read(0, &b); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	round++
	mu.Unlock()
	want := []nvmlsource.ProcessUsage{
		{Pid: 10, Listed: true, SmUtil: 80, Samples: 2},
		{Pid: 11, Listed: true},
		{Pid: 12, Listed: true, SmUtil: 20, Samples: 1},
	}
	if !slices.Equal(b.Processes, want) || b.Utilization != nvmlsource.UtilMeasured || b.MIG {
		t.Fatalf("first read: %+v", b)
	}
	// Each sample is kept with its timestamp, for the agent's alignment.
	wantSamples := []nvmlsource.Sample{{Pid: 10, TimeStamp: 100, SmUtil: 30}, {Pid: 10, TimeStamp: 200, SmUtil: 50}, {Pid: 12, TimeStamp: 150, SmUtil: 20}}
	if !slices.Equal(b.Samples, wantSamples) {
		t.Fatalf("first read's samples: %+v, want %+v", b.Samples, wantSamples)
	}
	if err := r.Read(0, &b); err != nil {
		t.Fatal(err)
	}
	want = []nvmlsource.ProcessUsage{
		{Pid: 10, Listed: true},
		{Pid: 11, Listed: true, SmUtil: 40, Samples: 1},
		{Pid: 12, Listed: true},
		{Pid: 99, SmUtil: 70, Samples: 1},
	}
	if !slices.Equal(b.Processes, want) {
		t.Fatalf("second read: %+v, want %+v", b.Processes, want)
	}
	// Only the stale repeat is left: listed, no new samples.
	if err := r.Read(0, &b); err != nil || len(b.Processes) != 3 || b.Processes[0].Samples != 0 {
		t.Fatalf("stale-only read: %+v, %v", b, err)
	}
	// This reader passed 0, then the newest timestamp it took each time,
	// whatever the share listing had passed before it.
	mu.Lock()
	defer mu.Unlock()
	if n := len(calls); n < 3 || !slices.Equal(calls[n-3:], []uint64{0, 200, 300}) {
		t.Fatalf("lastSeenTimeStamp passed: %v, want ... 0 200 300", calls)
	}
}

// migInstance is a mock MIG device: its UUID, compute slices, GPU
// instance id and listing.
func migInstance(uuid string, slices uint32, gi int, list func() ([]nvml.ProcessInfo, nvml.Return)) *mock.Device {
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
			return nvml.DeviceAttributes{ComputeInstanceSliceCount: slices, GpuInstanceSliceCount: slices}, nvml.SUCCESS
		},
		GetGpuInstanceIdFunc:           func() (int, nvml.Return) { return gi, nvml.SUCCESS },
		GetComputeRunningProcessesFunc: list,
	}
}

func listing(pids ...uint32) func() ([]nvml.ProcessInfo, nvml.Return) {
	return func() ([]nvml.ProcessInfo, nvml.Return) {
		var out []nvml.ProcessInfo
		for _, p := range pids {
			out = append(out, nvml.ProcessInfo{Pid: p})
		}
		return out, nvml.SUCCESS
	}
}

// migSlots puts d in MIG mode with devs in slots 0, 3 and 5.
func migSlots(d *server.Device, devs ...*mock.Device) {
	d.MigMode = nvml.DEVICE_MIG_ENABLE
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	slots := []int{0, 3, 5}
	d.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		for k, s := range slots {
			if s == j && k < len(devs) {
				return devs[k], nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
}

// TestProcessReaderUnsupportedAndMIG: a board without per-process
// utilization, and a MIG board of a 1g, a 3g and a 2g instance whose
// listing fails. The MIG board's read succeeds with what it could list;
// each process weighs its instance's compute slices shared among the
// instance's processes, and the failed instance's weight is kept apart,
// with its error (issue 23, item 11).
func TestProcessReaderUnsupportedAndMIG(t *testing.T) {
	srv, devs := fakeH100(t, steady)
	procs(devs[0], 20)
	devs[0].GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	devs[1].GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{}, nvml.ERROR_NOT_SUPPORTED }
	migSlots(devs[1],
		migInstance("MIG-a", 1, 1, listing(30)),
		migInstance("MIG-b", 3, 2, listing(31, 32)),
		migInstance("MIG-c", 2, 3, func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }))
	s := newSource(t, srv, nvmlsource.WithDevices("0", "1"))
	r := s.NewProcessReader()
	var b nvmlsource.BoardProcesses
	if err := r.Read(0, &b); err != nil || b.Utilization != nvmlsource.UtilUnsupported || len(b.Processes) != 1 {
		t.Fatalf("vGPU-like board: %+v, %v", b, err)
	}
	if err := r.Read(1, &b); err != nil {
		t.Fatalf("one MIG instance's failed listing failed the board's read: %v", err)
	}
	want := []nvmlsource.ProcessUsage{
		{Pid: 30, Listed: true, Instance: "MIG-a", Weight: 1_000_000},
		{Pid: 31, Listed: true, Instance: "MIG-b", Weight: 1_500_000},
		{Pid: 32, Listed: true, Instance: "MIG-b", Weight: 1_500_000},
	}
	if !b.MIG || b.Utilization != nvmlsource.UtilUnsupported || !slices.Equal(b.Processes, want) {
		t.Fatalf("MIG board: %+v, want %+v", b.Processes, want)
	}
	if b.UnlistedWeight != 2_000_000 || b.InstanceErrors != 1 || !errors.Is(b.InstanceErr, source.ErrRead) || !errors.Is(b.InstanceErr, nvml.ERROR_UNKNOWN) {
		t.Fatalf("failed instance: unlisted weight %d, %d errors, %v", b.UnlistedWeight, b.InstanceErrors, b.InstanceErr)
	}
	if n := len(devs[1].GetProcessUtilizationCalls()); n != 0 {
		t.Errorf("GetProcessUtilization called %d times under MIG", n)
	}
}

// TestProcessReaderMIGGPM: where the board supports GPM, each MIG
// instance's weight is its slices times its SM activity between two
// reads, from GpmMigSampleGet; the first read, with no earlier sample,
// weighs by slices. Every GPM sample but the latest is freed.
func TestProcessReaderMIGGPM(t *testing.T) {
	srv, devs := fakeH100(t, steady)
	d := devs[0]
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{IsSupportedDevice: 1}, nvml.SUCCESS }
	migSlots(d, migInstance("MIG-a", 1, 7, listing(30)), migInstance("MIG-b", 3, 9, listing(31)))
	var (
		mu     sync.Mutex
		gi     = map[nvml.GpmSample]int{}
		live   = map[nvml.GpmSample]bool{}
		busy   = map[int]float64{7: 90, 9: 10} // SM % by GPU instance id
		allocs int
	)
	srv.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		allocs++
		var smp *mock.GpmSample
		smp = &mock.GpmSample{FreeFunc: func() nvml.Return {
			mu.Lock()
			defer mu.Unlock()
			delete(live, smp)
			return nvml.SUCCESS
		}}
		live[smp] = true
		return smp, nvml.SUCCESS
	}
	d.GpmMigSampleGetFunc = func(id int, smp nvml.GpmSample) nvml.Return {
		mu.Lock()
		defer mu.Unlock()
		gi[smp] = id
		return nvml.SUCCESS
	}
	srv.GpmMetricsGetFunc = func(mg *nvml.GpmMetricsGetType) nvml.Return {
		mu.Lock()
		defer mu.Unlock()
		if mg.NumMetrics != 1 || mg.Metrics[0].MetricId != uint32(nvml.GPM_METRIC_SM_UTIL) || gi[mg.Sample1] != gi[mg.Sample2] {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		mg.Metrics[0].Value = busy[gi[mg.Sample2]]
		return nvml.SUCCESS
	}
	s := newSource(t, srv, nvmlsource.WithDevices("0"))
	r := s.NewProcessReader()
	var b nvmlsource.BoardProcesses
	if err := r.Read(0, &b); err != nil {
		t.Fatal(err)
	}
	if b.Processes[0].Weight != 1_000_000 || b.Processes[1].Weight != 3_000_000 {
		t.Fatalf("first read: %+v, want weights by slices", b.Processes)
	}
	if err := r.Read(0, &b); err != nil {
		t.Fatal(err)
	}
	// 1 slice at 90 % against 3 slices at 10 %.
	if b.Processes[0].Weight != 900_000 || b.Processes[1].Weight != 300_000 || b.Instances[0].Activity != 90 {
		t.Fatalf("second read: %+v %+v, want weights by slices × activity", b.Processes, b.Instances)
	}
	mu.Lock()
	defer mu.Unlock()
	if allocs != 4 || len(live) != 2 {
		t.Fatalf("%d GPM samples allocated, %d live; want 4 and 2 (one per instance)", allocs, len(live))
	}
}

func TestProcessReaderErrors(t *testing.T) {
	srv, devs := fakeH100(t, steady)
	devs[0].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }
	s := newSource(t, srv, nvmlsource.WithDevices("0", "1"))
	r := s.NewProcessReader()
	var b nvmlsource.BoardProcesses
	if err := r.Read(0, &b); !errors.Is(err, source.ErrRead) || !errors.Is(err, nvml.ERROR_UNKNOWN) {
		t.Fatalf("failed listing: %v, want ErrRead and ERROR_UNKNOWN", err)
	}
	if _, err := s.ReadEnergy(0); err != nil {
		t.Fatalf("a failed listing must leave the counter readable: %v", err)
	}
	// A listing that finds the board lost marks it lost for ReadEnergy.
	devs[1].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST }
	if err := r.Read(1, &b); !errors.Is(err, source.ErrDeviceLost) {
		t.Fatalf("lost board: %v", err)
	}
	before := len(devs[1].GetTotalEnergyConsumptionCalls())
	if _, err := s.ReadEnergy(1); !errors.Is(err, source.ErrDeviceLost) {
		t.Fatalf("ReadEnergy after a lost listing: %v", err)
	}
	if len(devs[1].GetTotalEnergyConsumptionCalls()) != before {
		t.Error("ReadEnergy called NVML on a board known lost")
	}
	if err := r.Read(5, &b); err == nil {
		t.Error("an index out of range read")
	}
	_ = s.Close()
	if err := r.Read(0, &b); !errors.Is(err, source.ErrUnavailable) {
		t.Fatalf("after Close: %v, want ErrUnavailable", err)
	}
}

// TestListingsWallStep: the wall clock steps 3 s back between two reads.
// The driver keeps the old samples, stamped above the new ones, and
// answers GetProcessUtilization as NVML does. Both listings, a
// ProcessReader's and the Source's share, take the new samples and not
// the old ones again: the reader sums the new ones alone, and the share is
// their split, where a query at the newest stamp taken would see nothing
// (and call the board idle, split evenly).
func TestListingsWallStep(t *testing.T) {
	me := uint32(os.Getpid())
	srv, devs := fakeH100(t, steady)
	d := devs[0]
	procs(d, me, other)
	base := time.Unix(1_700_000_000, 0)
	var (
		mu         sync.Mutex
		mono, wall time.Duration
		buffer     []nvml.ProcessUtilizationSample
	)
	at := func(w time.Duration) uint64 { return uint64(base.Add(w).UnixMicro()) }
	d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		var out []nvml.ProcessUtilizationSample
		for _, smp := range buffer {
			if smp.TimeStamp > last {
				out = append(out, smp)
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	clock := func() (time.Duration, time.Time) {
		mu.Lock()
		defer mu.Unlock()
		return mono, base.Add(wall)
	}
	set := func(m, w time.Duration, add ...nvml.ProcessUtilizationSample) {
		mu.Lock()
		defer mu.Unlock()
		mono, wall = m, w
		buffer = append(buffer, add...)
	}
	set(10*time.Second, 10*time.Second, sample(me, at(9*time.Second), 30), sample(other, at(9500*time.Millisecond), 70))
	s := newSource(t, srv, nvmlsource.WithDevices("0"), nvmlsource.WithProcesses(int(me)), nvmlsource.WithSampleClock(clock))
	r := s.NewProcessReader()
	var b nvmlsource.BoardProcesses
	if err := r.Read(0, &b); err != nil || len(b.Samples) != 2 {
		t.Fatalf("first read: %+v, %v", b.Samples, err)
	}
	if got, want := s.Share(0), (source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.3}); got != want {
		t.Fatalf("first share %+v, want %+v", got, want)
	}

	// One second later the clock reads 3 s less: 8 s. The new samples are
	// stamped after the previous read's instant on it, 7 s.
	set(11*time.Second, 8*time.Second, sample(me, at(7600*time.Millisecond), 80), sample(other, at(7700*time.Millisecond), 20))
	if err := r.Read(0, &b); err != nil {
		t.Fatal(err)
	}
	want := []nvmlsource.Sample{{Pid: me, TimeStamp: at(7600 * time.Millisecond), SmUtil: 80}, {Pid: other, TimeStamp: at(7700 * time.Millisecond), SmUtil: 20}}
	if !slices.Equal(b.Samples, want) {
		t.Errorf("read after the step: %+v, want the new samples %+v", b.Samples, want)
	}
	nvmlsource.RefreshShares(s)
	if got, want := s.Share(0), (source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.8}); got != want {
		t.Errorf("share after the step %+v, want %+v", got, want)
	}
	// A read with nothing new takes nothing, old or new.
	set(12*time.Second, 9*time.Second)
	if err := r.Read(0, &b); err != nil || len(b.Samples) != 0 {
		t.Errorf("third read: %+v, %v", b.Samples, err)
	}
}
