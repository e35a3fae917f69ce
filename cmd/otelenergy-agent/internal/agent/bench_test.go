//go:build cgo && linux

package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/procfs"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// benchDevice is a fake H100 whose process calls answer from fixed slices
// without recording calls, as the real library answers from the driver:
// the moq mock's call log would allocate on every call and hide the
// agent's own allocations.
type benchDevice struct {
	*server.Device
	mu      sync.Mutex
	energy  uint64
	procs   []nvml.ProcessInfo
	samples []nvml.ProcessUtilizationSample
	ts      uint64
}

func (d *benchDevice) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.energy, nvml.SUCCESS
}
func (d *benchDevice) GetEnforcedPowerLimit() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
func (d *benchDevice) GetPowerManagementLimitConstraints() (uint32, uint32, nvml.Return) {
	return 200_000, 700_000, nvml.SUCCESS
}
func (d *benchDevice) GetMigMode() (int, int, nvml.Return) {
	return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
}
func (d *benchDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.procs, nvml.SUCCESS
}
func (d *benchDevice) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return nil, nvml.ERROR_NOT_SUPPORTED
}

// GetProcessUtilization answers one new sample per process per call.
func (d *benchDevice) GetProcessUtilization(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ts = max(d.ts, last) + 1_000_000
	for i := range d.samples {
		d.samples[i].TimeStamp = d.ts
	}
	return d.samples, nvml.SUCCESS
}

type benchProcs struct{}

func (benchProcs) StartTime(pid uint32) (uint64, error) { return uint64(pid), nil }
func (benchProcs) Info(pid uint32) (procfs.Info, error) {
	return procfs.Info{StartTime: uint64(pid), Name: "worker"}, nil
}

// BenchmarkPass measures one sampling pass over eight fake H100 boards
// with eight processes each: "read" lists every board's processes and
// utilization through nvmlsource (the NVML calls alone, the baseline);
// "pass" is the agent's whole pass: the same listing plus each board's ten
// new counter intervals read from the ring and split; "carbon" is
// the pass of an agent that also converts each interval into emissions
// (a static intensity, a PUE and embodied emissions). "mps50/read" and
// "mps50/pass" are the same with 50 MPS clients on every board.
func BenchmarkPass(b *testing.B) {
	benchPass(b, 8)
	b.Run("mps50", func(b *testing.B) { benchPass(b, 50) })
}

func benchPass(b *testing.B, procs int) {
	srv := dgxh100.New()
	devs := make([]*benchDevice, len(srv.Devices))
	for i, d := range srv.Devices {
		bd := &benchDevice{Device: d.(*server.Device)}
		for k := range procs {
			pid := uint32(1000 + procs*i + k)
			bd.procs = append(bd.procs, nvml.ProcessInfo{Pid: pid})
			bd.samples = append(bd.samples, nvml.ProcessUtilizationSample{Pid: pid, SmUtil: uint32(1 + (5+10*k)%90)})
		}
		devs[i] = bd
	}
	srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS }
	src, err := nvmlsource.New(nvmlsource.WithInterface(srv), nvmlsource.WithDevices("0", "1", "2", "3", "4", "5", "6", "7"))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	mon, rings, err := agent.NewMonitor(src, otelenergy.WithClock(func() time.Time { return now }), otelenergy.WithMeterProvider(mp))
	if err != nil {
		b.Fatal(err)
	}
	defer mon.Shutdown(context.Background())
	ag, err := agent.New(agent.Config{Rings: rings, Lister: src.NewProcessReader(), Resolver: benchProcs{}, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	defer ag.Shutdown()
	model, err := carbon.NewModel(carbon.NewStatic(carbon.Intensity{MgPerKWh: 436_000}), carbon.WithPUE(1_135_000), carbon.WithEmbodied(12_500_000))
	if err != nil {
		b.Fatal(err)
	}
	agc, err := agent.New(agent.Config{Rings: rings, Lister: src.NewProcessReader(), Resolver: benchProcs{}, MeterProvider: mp, Carbon: model})
	if err != nil {
		b.Fatal(err)
	}
	defer agc.Shutdown()
	// advance steps every counter ten times, 100 ms apart.
	advance := func() {
		for range 10 {
			now = now.Add(100 * time.Millisecond)
			for _, d := range devs {
				d.mu.Lock()
				d.energy += 25_000
				d.mu.Unlock()
			}
			mon.Sample()
		}
	}
	mon.Sample()
	for range 3 {
		advance()
		ag.Pass()
	}

	b.Run("read", func(b *testing.B) {
		r := src.NewProcessReader()
		var bp nvmlsource.BoardProcesses
		for i := range devs {
			_ = r.Read(i, &bp)
		}
		b.ReportAllocs()
		for b.Loop() {
			for i := range devs {
				if err := r.Read(i, &bp); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			advance()
			b.StartTimer()
			ag.Pass()
		}
		if t := ag.Totals(0); len(t.Processes) != procs {
			b.Fatalf("board 0 has %d process series, want %d", len(t.Processes), procs)
		}
	})
	b.Run("carbon", func(b *testing.B) {
		advance()
		agc.Pass() // past the steps the other agent's passes left
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			advance()
			b.StartTimer()
			agc.Pass()
		}
		if t := agc.Totals(0); len(t.Processes) != procs {
			b.Fatalf("board 0 has %d process series, want %d", len(t.Processes), procs)
		}
	})
}
