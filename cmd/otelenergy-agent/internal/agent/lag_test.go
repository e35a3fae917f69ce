//go:build cgo && linux

package agent_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// TestLateSamplesThroughNVML runs the agent on go-nvml's fake DGX H100
// through the real ProcessReader. Board 0 idles at 70 W for 3 s; then two
// processes take turns every 700 ms, one at 80 % SM, one at 40 %, each
// drawing 4 W per percent, until 55 s. The driver samples every 200 ms and each
// sample becomes visible 400 ms after its timestamp, which is the fake
// clock's time in µs. Split by arrival, energy at every change of turn
// would go to the wrong process; aligned by timestamp, each process's
// total is within 2 % of its truth and nothing is unattributed.
func TestLateSamplesThroughNVML(t *testing.T) {
	const (
		step   = 100 * time.Millisecond
		period = 200 * time.Millisecond
		lag    = 400 * time.Millisecond
		turn   = 700 * time.Millisecond
		start  = 3 * time.Second
	)
	var (
		mu      sync.Mutex
		now     = time.Unix(1_700_000_000, 0)
		t0      = now
		energy  float64 // mJ
		truth   [2]float64
		integ   [2]float64 // %·ms since the last sample
		samples []nvml.ProcessUtilizationSample
		visible []time.Time
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	util := func(at time.Duration) [2]float64 {
		if at < start || at >= 55*time.Second {
			return [2]float64{} // idle at the end: nothing held is busy
		}
		if (at-start)/turn%2 == 0 {
			return [2]float64{80, 0}
		}
		return [2]float64{0, 40}
	}
	srv := dgxh100.New()
	dev := srv.Devices[0].(*server.Device)
	counter := uint64(0)
	dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { mu.Lock(); defer mu.Unlock(); return counter, nvml.SUCCESS }
	dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
	dev.GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) { return 200_000, 700_000, nvml.SUCCESS }
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		if now.Sub(t0) < start {
			return nil, nvml.SUCCESS
		}
		return []nvml.ProcessInfo{{Pid: 100}, {Pid: 101}}, nvml.SUCCESS
	}
	dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	dev.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		var out []nvml.ProcessUtilizationSample
		for k, s := range samples {
			if s.TimeStamp > last && !visible[k].After(now) {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	src, err := nvmlsource.New(nvmlsource.WithInterface(srv), nvmlsource.WithDevices("0"))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	mon, rings, err := agent.NewMonitor(src, otelenergy.WithClock(clock), otelenergy.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Shutdown(context.Background())
	ag, err := agent.New(agent.Config{Rings: rings, Lister: src.NewProcessReader(), Resolver: anyProc{}, MeterProvider: mp, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	mon.Sample()
	for ms := 1; ms <= 60_000; ms++ {
		mu.Lock()
		now = now.Add(time.Millisecond)
		at := now.Sub(t0)
		u := util(at - time.Millisecond)
		for p := range 2 {
			w := 4 * u[p] // W
			truth[p] += w // mJ over 1 ms
			energy += w
			integ[p] += u[p]
		}
		energy += 70
		if at%step == 0 {
			counter = uint64(energy)
		}
		if at%period == 0 {
			for p := range 2 {
				if integ[p] > 0 {
					samples = append(samples, nvml.ProcessUtilizationSample{Pid: uint32(100 + p), TimeStamp: uint64(now.UnixMicro()),
						SmUtil: uint32(math.Round(integ[p] / float64(period/time.Millisecond)))})
					visible = append(visible, now.Add(lag))
				}
				integ[p] = 0
			}
		}
		mu.Unlock()
		if ms%20 == 0 {
			mon.Sample()
		}
		if ms%1000 == 0 {
			ag.Pass()
			if testing.Verbose() {
				tt := ag.Totals(0)
				mu.Lock()
				t.Logf("t=%d got %d %d truth %.0f %.0f unat %d", ms/1000, tt.Processes[agent.Process{Pid: 100, StartTime: 100}], tt.Processes[agent.Process{Pid: 101, StartTime: 101}], truth[0], truth[1], tt.UnattributedMJ)
				mu.Unlock()
			}
		}
	}
	tot := ag.Totals(0)
	for p := range 2 {
		got := float64(tot.Processes[agent.Process{Pid: uint32(100 + p), StartTime: uint64(100 + p)}])
		e := math.Abs(got-truth[p]) / truth[p]
		t.Logf("pid %d: %.1f J, truth %.1f J (%.2f %%)", 100+p, got/1000, truth[p]/1000, e*100)
		if e > 0.02 {
			t.Errorf("pid %d: %.1f J, truth %.1f J", 100+p, got/1000, truth[p]/1000)
		}
	}
	if tot.UnattributedMJ > tot.EnergyMJ/500 {
		t.Errorf("unattributed %d mJ of %d", tot.UnattributedMJ, tot.EnergyMJ)
	}
	if math.Abs(tot.IdleWatts-70) > 0.5 {
		t.Errorf("idle %.2f W, want 70", tot.IdleWatts)
	}
}
