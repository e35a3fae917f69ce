//go:build cgo && linux

package otelenergy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
)

// TestNVMLAttributedProcessAbsent meters one board of the fake DGX H100
// through the NVML adapter, the Monitor, the middleware and the span
// exporter. The board runs one process, the backend. When the attributed
// pid is the backend's, the request gets the board's energy, final and
// exact. When it is a pid the board does not list (a gateway attributed to
// itself, a wrong -backend-pid), the request must not report a confident
// zero: it gets the board's energy unsplit, the same figure, flagged
// shared and approximate. So does a MIG board whose listing is refused or
// empty, which proves nothing about the other slices' tenants.
func TestNVMLAttributedProcessAbsent(t *testing.T) {
	const (
		backend = 4242
		watts   = 300
		// stepMJ is what the counter gains per step of the fake board.
		stepMJ = watts * uint64(step/time.Millisecond)
	)
	tests := []struct {
		name       string
		pid        int
		setup      func(t *testing.T, d *server.Device)
		wantShared bool
	}{
		{name: "backend pid named", pid: backend},
		{name: "attributed pid not on the board", pid: backend + 1, wantShared: true},
		{
			// Listed, but idle while another process does all the SM
			// work: a measured share of 0 is not a proven one.
			name: "attributed pid listed, idle while another works",
			pid:  backend,
			setup: func(t *testing.T, d *server.Device) {
				d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
					return []nvml.ProcessInfo{{Pid: backend}, {Pid: backend + 1}}, nvml.SUCCESS
				}
				d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
					return []nvml.ProcessUtilizationSample{{Pid: backend, TimeStamp: 1}, {Pid: backend + 1, TimeStamp: 1, SmUtil: 80}}, nvml.SUCCESS
				}
			},
			wantShared: true,
		},
		{
			// An unprivileged tenant of a MIG slice: the parent handle
			// refuses to list, which proves nothing about other tenants.
			name: "MIG board, listing refused",
			pid:  backend,
			setup: func(t *testing.T, d *server.Device) {
				if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
					t.Fatalf("SetMigMode = %v", ret)
				}
				d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
			},
			wantShared: true,
		},
		{
			name: "MIG board, empty listing",
			pid:  backend,
			setup: func(t *testing.T, d *server.Device) {
				if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
					t.Fatalf("SetMigMode = %v", ret)
				}
				d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
			},
			wantShared: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			t0 := clock.Now()
			srv := dgxh100.New()
			d := srv.Devices[0].(*server.Device)
			// A staircase at 300 W that steps every 100 ms of the fake
			// clock.
			d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
				return uint64(clock.Now().Sub(t0)/step) * stepMJ, nvml.SUCCESS
			}
			d.GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) { return 200_000, 700_000, nvml.SUCCESS }
			d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
			d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: backend, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
			}
			d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
			d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
				return []nvml.ProcessUtilizationSample{{Pid: backend, TimeStamp: 1, SmUtil: 80}}, nvml.SUCCESS
			}
			if tt.setup != nil {
				tt.setup(t, d)
			}

			src, err := NewNVMLSource(nvmlsource.WithInterface(srv), WithDevices("0"), WithProcesses(tt.pid))
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewMonitor(src, WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Shutdown(context.Background()) })
			rig := &testRig{m: m, clock: clock}

			inmem := tracetest.NewInMemoryExporter()
			sr, tp := newTracing(sdktrace.WithBatcher(NewSpanExporter(inmem, m), sdktrace.WithBatchTimeout(time.Hour)))
			defer tp.Shutdown(context.Background())
			h := otelhttp.NewHandler(NewMiddleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for range 10 {
					m.AddTokens(r.Context(), 4)
					rig.tick(step)
				}
			})), "op", otelhttp.WithTracerProvider(tp))
			m.Sample()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/chat/completions", nil))

			// As the span ends, the figure is an estimate.
			ended := sr.Ended()
			if len(ended) != 1 {
				t.Fatalf("%d spans ended, want 1", len(ended))
			}
			a := spanAttrs(ended[0])
			if mj := a[EnergyMillijoulesKey].AsInt64(); mj <= 0 {
				t.Errorf("estimated energy.millijoules = %d, want the board's energy over the request", mj)
			}
			if got := a[sharedKey].AsBool(); got != tt.wantShared {
				t.Errorf("estimate: otelenergy.energy.shared = %v, want %v", got, tt.wantShared)
			}
			if !a[approximateKey].AsBool() {
				t.Error("estimate: otelenergy.energy.approximate = false")
			}

			// Once final, through the span exporter.
			flushWhileSampling(t, rig, tp)
			exported := inmem.GetSpans().Snapshots()
			if len(exported) != 1 {
				t.Fatalf("%d spans exported, want 1", len(exported))
			}
			a = spanAttrs(exported[0])
			mj := a[EnergyMillijoulesKey].AsInt64()
			// The request spans the 10 steps it ticked through, alone: the
			// board's energy then, 10 steps' worth, is all the request's.
			if mj != int64(10*stepMJ) {
				t.Errorf("final energy.millijoules = %d, want the board's %d", mj, 10*stepMJ)
			}
			if got := a[sharedKey].AsBool(); got != tt.wantShared {
				t.Errorf("final: otelenergy.energy.shared = %v, want %v", got, tt.wantShared)
			}
			if got := a[approximateKey].AsBool(); got != tt.wantShared {
				t.Errorf("final: otelenergy.energy.approximate = %v, want %v", got, tt.wantShared)
			}
		})
	}
}
