//go:build cgo && linux

package doctor_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/otelenergy/otelenergy/internal/doctor"
	"github.com/otelenergy/otelenergy/internal/fakeclock"
)

// fakeClock is the doctor's clock: Sleep advances it.
type fakeClock = fakeclock.Clock

// node is a mocked DGX H100 whose boards' counters step every period at
// watts, on the fake clock, and whose GetPowerUsage reads usageW.
type node struct {
	srv    *server.Server
	clock  *fakeClock
	period time.Duration
	watts  float64
	usageW float64
	pids   []uint32
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{srv: dgxh100.New(), clock: fakeclock.New(time.Unix(1_700_000_000, 0)), period: 100 * time.Millisecond, watts: 300, usageW: 305, pids: []uint32{4242}}
	start := n.clock.Now()
	for _, d := range n.srv.Devices {
		dev := d.(*server.Device)
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
			steps := n.clock.Now().Sub(start) / n.period
			return 1_000_000 + uint64(float64(steps)*n.period.Seconds()*n.watts*1000), nvml.SUCCESS
		}
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(n.usageW * 1000), nvml.SUCCESS }
		dev.GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) { return 200_000, 700_000, nvml.SUCCESS }
		dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			var out []nvml.ProcessInfo
			for _, p := range n.pids {
				out = append(out, nvml.ProcessInfo{Pid: p})
			}
			return out, nvml.SUCCESS
		}
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
	}
	return n
}

func (n *node) device(i int) *server.Device { return n.srv.Devices[i].(*server.Device) }

// procRoot is a /proc with a directory for each pid.
func procRoot(t *testing.T, pids ...uint32) string {
	dir := t.TempDir()
	for _, p := range pids {
		if err := os.Mkdir(filepath.Join(dir, strconv.Itoa(int(p))), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// otlpReceiver answers an OTLP/HTTP export on 127.0.0.1.
func otlpReceiver(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/metrics" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (n *node) config(t *testing.T, env map[string]string) doctor.Config {
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["OTEL_EXPORTER_OTLP_ENDPOINT"]; !ok {
		env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlpReceiver(t)
	}
	return doctor.Config{LookupEnv: envOf(env), ProcRoot: procRoot(t, n.pids...), Window: 3 * time.Second,
		Now: n.clock.Now, Sleep: n.clock.Sleep, Devices: []string{"0"}}
}

func only(t *testing.T, r doctor.Report, check string) doctor.Finding {
	t.Helper()
	var found []doctor.Finding
	for _, f := range r.Findings {
		if f.Check == check {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		var b bytes.Buffer
		r.WriteTo(&b)
		t.Fatalf("%d findings for %q, want 1:\n%s", len(found), check, b.String())
	}
	return found[0]
}

// TestHealthyNode checks a board that does everything right: every check
// passes, the period measured is the mock's, and the counter's power is
// the mock's wattage.
func TestHealthyNode(t *testing.T) {
	n := newNode(t)
	r := doctor.CheckNVML(context.Background(), n.srv, n.config(t, nil))
	var b bytes.Buffer
	r.WriteTo(&b)
	t.Log("\n" + b.String())
	if r.Failed() {
		t.Fatalf("a healthy node failed:\n%s", b.String())
	}
	for _, f := range r.Findings {
		if f.Status != doctor.OK {
			t.Errorf("not ok: %+v", f)
		}
	}
	if f := only(t, r, "GPU 0 energy counter"); !strings.Contains(f.Detail, "steps every 100ms") {
		t.Errorf("period: %s", f.Detail)
	}
	if f := only(t, r, "GPU 0 power"); !strings.Contains(f.Detail, "300.0 W from the counter, 305.0 W from GetPowerUsage") {
		t.Errorf("power: %s", f.Detail)
	}
	if f := only(t, r, "nvml"); !strings.Contains(f.Detail, "driver 550.54.15") {
		t.Errorf("versions: %s", f.Detail)
	}
	if f := only(t, r, "GPU 0 power limit"); f.Detail != "700 W enforced, settable 200-700 W" {
		t.Errorf("limits: %s", f.Detail)
	}
	// Boards 1-7 are not chosen by -devices 0 and are only named.
	if f := only(t, r, "GPU 3"); !strings.Contains(f.Detail, "left out") {
		t.Errorf("GPU 3: %s", f.Detail)
	}
	if !strings.Contains(b.String(), "0 failed, 0 warnings") {
		t.Errorf("summary:\n%s", b.String())
	}
	if i, s := len(n.srv.InitCalls()), len(n.srv.ShutdownCalls()); i != 1 || s != 1 {
		t.Errorf("Init called %d times, Shutdown %d; want 1 each", i, s)
	}
}

// TestMeasuredPeriod checks the period measurement at 20 ms (V100-like)
// and that a 50 ms poll still finds a 100 ms counter's period.
func TestMeasuredPeriod(t *testing.T) {
	n := newNode(t)
	n.period = 20 * time.Millisecond
	cfg := n.config(t, nil)
	r := doctor.CheckNVML(context.Background(), n.srv, cfg)
	if f := only(t, r, "GPU 0 energy counter"); !strings.HasPrefix(f.Detail, "steps every 20ms") {
		t.Fatalf("period: %s", f.Detail)
	}
}

// TestFailures breaks one thing at a time and checks that the right check
// fails, with a fix, and that the report fails.
func TestFailures(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(n *node, env map[string]string, cfg *doctor.Config)
		check   string
		status  doctor.Status
		detail  string
	}{
		{name: "no energy counter", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			n.device(0).GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		}, check: "GPU 0 energy counter", status: doctor.Fail, detail: "ERROR_NOT_SUPPORTED"},
		{name: "energy counter fails", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			n.device(0).GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, check: "GPU 0 energy counter", status: doctor.Fail, detail: "GetTotalEnergyConsumption: ERROR_UNKNOWN"},
		{name: "energy counter fails while watched", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			dev := n.device(0)
			ok, calls := dev.GetTotalEnergyConsumptionFunc, 0
			dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
				if calls++; calls > 100 {
					return 0, nvml.ERROR_GPU_IS_LOST
				}
				return ok()
			}
		}, check: "GPU 0 energy counter", status: doctor.Fail, detail: "failed while watched: nvml GetTotalEnergyConsumption: ERROR_GPU_IS_LOST"},
		{name: "counter stuck", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			n.device(0).GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 5, nvml.SUCCESS }
		}, check: "GPU 0 energy counter", status: doctor.Fail, detail: "stepped 0 times"},
		{name: "counter goes backwards", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			var k uint64
			n.device(0).GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
				k++
				return (k / 50 % 4) * 1000, nvml.SUCCESS
			}
		}, check: "GPU 0 energy counter", status: doctor.Fail, detail: "went backwards"},
		{name: "power disagrees", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) { n.usageW = 400 },
			check: "GPU 0 power", status: doctor.Warn, detail: "differ by more than 10%"},
		{name: "no permission to list processes", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			n.device(0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
		}, check: "GPU 0 process listing", status: doctor.Fail, detail: "ERROR_NO_PERMISSION"},
		{name: "process listing fails", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			n.device(0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }
		}, check: "GPU 0 process listing", status: doctor.Fail, detail: "GetComputeRunningProcesses: ERROR_UNKNOWN"},
		{name: "no process utilization", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			n.device(0).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
				return nil, nvml.ERROR_NOT_SUPPORTED
			}
		}, check: "GPU 0 process utilization", status: doctor.Warn, detail: "even shares"},
		{name: "pids of another PID namespace", breakIt: func(n *node, _ map[string]string, cfg *doctor.Config) {
			cfg.ProcRoot = filepath.Join(cfg.ProcRoot, "empty")
			os.Mkdir(cfg.ProcRoot, 0o755)
		}, check: "GPU 0 processes in ", status: doctor.Fail, detail: "1 of 1 listed pids are not there (4242)"},
		{name: "pids of another PID namespace, for the proxy", breakIt: func(n *node, _ map[string]string, cfg *doctor.Config) {
			cfg.ProcRoot = filepath.Join(cfg.ProcRoot, "empty")
			os.Mkdir(cfg.ProcRoot, 0o755)
			cfg.AnyPIDNamespace = true
		}, check: "GPU 0 processes in ", status: doctor.Warn, detail: "1 of 1 listed pids are not there (4242)"},
		{name: "no power constraints", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			n.device(0).GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
		}, check: "GPU 0 power limit", status: doctor.Warn, detail: "constraints do not answer"},
		{name: "CUDA_VISIBLE_DEVICES hides every GPU", breakIt: func(n *node, env map[string]string, cfg *doctor.Config) {
			cfg.Devices = nil
			env["CUDA_VISIBLE_DEVICES"] = "GPU-nonexistent"
		}, check: "GPU selection", status: doctor.Fail, detail: "leaves no GPU"},
		{name: "NVML cannot count the GPUs", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			n.srv.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, check: "GPU selection", status: doctor.Fail, detail: "DeviceGetCount: ERROR_UNKNOWN"},
		{name: "NVML shows no GPU", breakIt: func(n *node, _ map[string]string, cfg *doctor.Config) {
			cfg.Devices = nil
			n.srv.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
		}, check: "GPU selection", status: doctor.Fail, detail: "NVML shows no GPU"},
		{name: "a board cannot be identified", breakIt: func(n *node, _ map[string]string, _ *doctor.Config) {
			n.device(0).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
		}, check: "GPU 0", status: doctor.Fail, detail: "cannot be identified"},
		{name: "-devices names no GPU", breakIt: func(n *node, _ map[string]string, cfg *doctor.Config) {
			cfg.Devices = []string{"9"}
		}, check: "GPU selection", status: doctor.Fail, detail: `"9" matches no GPU`},
		{name: "OTLP endpoint does not answer", breakIt: func(n *node, env map[string]string, _ *doctor.Config) {
			env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://" + closedPort()
		}, check: "metrics exporter", status: doctor.Fail, detail: "does not answer"},
		{name: "OTLP endpoint with a path that is not a receiver", breakIt: func(n *node, env map[string]string, _ *doctor.Config) {
			env["OTEL_EXPORTER_OTLP_ENDPOINT"] += "/wrong"
		}, check: "metrics exporter", status: doctor.Fail, detail: "answers 404"},
		{name: "OTLP gRPC endpoint closed", breakIt: func(n *node, env map[string]string, _ *doctor.Config) {
			env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
			env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://" + closedPort()
		}, check: "metrics exporter", status: doctor.Fail, detail: "otlp grpc 127.0.0.1:"},
		{name: "unknown exporter", breakIt: func(n *node, env map[string]string, _ *doctor.Config) {
			env["OTEL_METRICS_EXPORTER"] = "zipkin"
		}, check: "metrics exporter", status: doctor.Fail, detail: `OTEL_METRICS_EXPORTER="zipkin" is not an exporter`},
		{name: "Prometheus bound to localhost", breakIt: func(n *node, env map[string]string, _ *doctor.Config) {
			env["OTEL_METRICS_EXPORTER"] = "prometheus"
		}, check: "metrics exporter", status: doctor.Fail, detail: "localhost:9464 answers only on this host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": otlpReceiver(t)}
			cfg := n.config(t, env)
			tt.breakIt(n, env, &cfg)
			r := doctor.CheckNVML(context.Background(), n.srv, cfg)
			var b bytes.Buffer
			r.WriteTo(&b)
			var hit *doctor.Finding
			for i, f := range r.Findings {
				if strings.HasPrefix(f.Check, tt.check) && f.Status == tt.status && strings.Contains(f.Detail, tt.detail) {
					hit = &r.Findings[i]
				}
			}
			if hit == nil {
				t.Fatalf("no %v finding %q containing %q:\n%s", tt.status, tt.check, tt.detail, b.String())
			}
			if tt.status == doctor.Fail && (hit.Fix == "" || !r.Failed() || !strings.Contains(b.String(), "fix: "+hit.Fix)) {
				t.Fatalf("a failure without a printed fix, or a report that passes:\n%s", b.String())
			}
			if tt.status == doctor.Warn && r.Failed() {
				t.Fatalf("a warning failed the report:\n%s", b.String())
			}
			if i, s := len(n.srv.InitCalls()), len(n.srv.ShutdownCalls()); i != 1 || s != 1 {
				t.Fatalf("Init called %d times, Shutdown %d; want 1 each", i, s)
			}
		})
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestMIGBoard lists processes per MIG instance, as an unprivileged caller
// must, and reports utilization as unavailable without calling it.
func TestMIGBoard(t *testing.T) {
	n := newNode(t)
	dev := n.device(0)
	dev.MigMode = nvml.DEVICE_MIG_ENABLE
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
	dev.GetProcessUtilizationFunc = nil // a call would panic
	migs := []*mock.Device{
		{GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return []nvml.ProcessInfo{{Pid: 4242}}, nvml.SUCCESS }},
		{GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }},
	}
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		if j < len(migs) {
			return migs[j], nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	r := doctor.CheckNVML(context.Background(), n.srv, n.config(t, nil))
	if r.Failed() {
		var b bytes.Buffer
		r.WriteTo(&b)
		t.Fatalf("MIG board failed:\n%s", b.String())
	}
	if f := only(t, r, "GPU 0 MIG"); !strings.Contains(f.Detail, "enabled, 2 instances") {
		t.Errorf("MIG: %s", f.Detail)
	}
	if f := only(t, r, "GPU 0 process listing"); f.Detail != "1 compute processes" {
		t.Errorf("listing: %s", f.Detail)
	}
}

// TestNoNVML fails Init and checks that no other NVML function is called
// (the mock panics on any unset function) and that the report says so.
func TestNoNVML(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	r := doctor.CheckNVML(context.Background(), lib, doctor.Config{LookupEnv: envOf(map[string]string{"OTEL_METRICS_EXPORTER": "none"}),
		PIDNamespace: func() (string, error) { return "pid:[4026531836]", nil }})
	f := only(t, r, "nvml")
	if f.Status != doctor.Fail || !strings.Contains(f.Detail, "ERROR_LIBRARY_NOT_FOUND") || !strings.Contains(f.Fix, "NVIDIA container toolkit") {
		t.Fatalf("finding %+v", f)
	}
	if len(lib.InitCalls()) != 1 || len(lib.ShutdownCalls()) != 0 {
		t.Fatalf("Init %d, Shutdown %d calls", len(lib.InitCalls()), len(lib.ShutdownCalls()))
	}
}
