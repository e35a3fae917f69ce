//go:build cgo && linux

package nvmlsource_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

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

func TestProcessReaderUnsupportedAndMIG(t *testing.T) {
	srv, devs := fakeH100(t, steady)
	procs(devs[0], 20)
	devs[0].GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	devs[1].MigMode = nvml.DEVICE_MIG_ENABLE
	devs[1].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
	migs := []*mock.Device{
		{GetUUIDFunc: func() (string, nvml.Return) { return "MIG-a", nvml.SUCCESS },
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return []nvml.ProcessInfo{{Pid: 30}}, nvml.SUCCESS }},
		{GetUUIDFunc: func() (string, nvml.Return) { return "MIG-b", nvml.SUCCESS },
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: 31}, {Pid: 32}}, nvml.SUCCESS
			}},
	}
	devs[1].GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	devs[1].GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		switch j {
		case 0:
			return migs[0], nvml.SUCCESS
		case 3:
			return migs[1], nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	s := newSource(t, srv, nvmlsource.WithDevices("0", "1"))
	r := s.NewProcessReader()
	var b nvmlsource.BoardProcesses
	if err := r.Read(0, &b); err != nil || b.Utilization != nvmlsource.UtilUnsupported || len(b.Processes) != 1 {
		t.Fatalf("vGPU-like board: %+v, %v", b, err)
	}
	if err := r.Read(1, &b); err != nil {
		t.Fatal(err)
	}
	want := []nvmlsource.ProcessUsage{
		{Pid: 30, Listed: true, Instance: "MIG-a"},
		{Pid: 31, Listed: true, Instance: "MIG-b"},
		{Pid: 32, Listed: true, Instance: "MIG-b"},
	}
	if !b.MIG || b.Utilization != nvmlsource.UtilUnsupported || !slices.Equal(b.Processes, want) {
		t.Fatalf("MIG board: %+v, want %+v", b, want)
	}
	if n := len(devs[1].GetProcessUtilizationCalls()); n != 0 {
		t.Errorf("GetProcessUtilization called %d times under MIG", n)
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
