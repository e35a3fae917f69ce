package app_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/app"
	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/cputime"
	"github.com/otelenergy/otelenergy/internal/fakesysfs"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
)

// fakeSys writes a /sys with the given trees of the root module's
// testdata.
func fakeSys(t *testing.T, trees ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, tr := range trees {
		if err := fakesysfs.Write(root, filepath.FromSlash("../../../../internal/"+tr)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func parse(t *testing.T, args ...string) flags.Config {
	t.Helper()
	cfg, err := flags.Parse(args, func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestOpenNodeSources opens a node of two Intel GPUs and a two-socket
// RAPL host (fake sysfs trees) as -sources chooses, and checks what is
// metered and that every source tried logs one line.
func TestOpenNodeSources(t *testing.T) {
	both := fakeSys(t, "intelgpu/testdata/twogpus.tree", "rapl/testdata/twosocket.tree")
	gpusOnly := fakeSys(t, "intelgpu/testdata/twogpus.tree")
	tests := []struct {
		name       string
		sys        string
		sources    string
		host, psys bool
		lines      int // energy source lines logged
		err        string
	}{
		// NVML and AMD SMI are unusable here (no driver, no ROCm): their
		// lines say why; Intel hwmon is used; RAPL adds the host and psys.
		{name: "auto", sys: both, sources: "auto", host: true, psys: true, lines: 5},
		{name: "auto without RAPL", sys: gpusOnly, sources: "auto", lines: 4},
		{name: "intel only", sys: both, sources: "intel", lines: 1},
		{name: "intel and rapl", sys: both, sources: "intel,rapl", host: true, psys: true, lines: 3},
		{name: "rapl named and absent", sys: gpusOnly, sources: "intel,rapl", err: "-sources names rapl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			cfg := parse(t, "-sources", tt.sources, "-sys-root", tt.sys)
			nd, err := app.OpenNode(cfg, slog.New(slog.NewTextHandler(&log, nil)))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("OpenNode = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer nd.Source.Close()
			if nd.Source.Kind() != energysource.IntelHwmon || len(nd.Source.Devices()) != 2 {
				t.Errorf("accelerator %s with %d devices", nd.Source.Kind(), len(nd.Source.Devices()))
			}
			// Intel hwmon lists no processes: every pass's listing fails,
			// so that the board's active energy is unattributed.
			var bp nvmlsource.BoardProcesses
			if err := nd.Lister.Read(0, &bp); err == nil || !strings.Contains(err.Error(), "intel-hwmon") {
				t.Errorf("the Intel board's listing: %v", err)
			}
			if (nd.Host != nil) != tt.host || (nd.Whole != nil) != tt.psys {
				t.Errorf("host %v, psys %v; want %v, %v", nd.Host != nil, nd.Whole != nil, tt.host, tt.psys)
			}
			if nd.Host != nil {
				defer nd.Host.Close()
				if n := len(nd.Host.Devices()); n != 4 {
					t.Errorf("host has %d domains, want package and dram of 2 sockets", n)
				}
			}
			if nd.Whole != nil {
				defer nd.Whole.Close()
			}
			if n := strings.Count(log.String(), "msg=\"energy source "); n != tt.lines {
				t.Errorf("%d energy source lines, want %d:\n%s", n, tt.lines, log.String())
			}
		})
	}
}

// TestRunExportsHost runs the agent over a GPU board and a fake RAPL host
// whose package-0 draws 3 J while the GPU's process, pid 42, used 60 of
// 100 busy ticks and the CPUs idled 100 more: its 0.9 J share, and per
// hw.id the identity, reach the final export.
func TestRunExportsHost(t *testing.T) {
	sys := fakeSys(t, "rapl/testdata/twosocket.tree")
	proc := t.TempDir()
	writeProc := func(busy, idle, ticks uint64) {
		if err := os.WriteFile(filepath.Join(proc, "stat"), fmt.Appendf(nil, "cpu  %d 0 0 %d 0 0 0 0 0 0\n", busy, idle), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(proc, "42"), 0o755); err != nil {
			t.Fatal(err)
		}
		st := fmt.Appendf(nil, "42 (fake) S 1 42 42 0 -1 0 0 0 0 0 %d 0 0 0 20 0 1 0 5 1 1\n", ticks)
		if err := os.WriteFile(filepath.Join(proc, "42", "stat"), st, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeProc(1000, 1000, 0)
	h, b := newHarness(), newBoard()
	d := h.deps(nil)
	d.OpenNode = func(cfg flags.Config, log *slog.Logger) (app.Node, error) {
		nd, _ := b.node(cfg, log)
		host, _, err := energysource.Host(energysource.WithSysfs(sys))
		if err != nil {
			return app.Node{}, err
		}
		nd.Host, nd.CPU = host, &cputime.Trees{Root: proc}
		return nd, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, boardConfig(t, "5s"), h.logger, d) }()
	tick(t, h, done)
	time.Sleep(20 * time.Millisecond)
	writeProc(1100, 1100, 60)
	if err := fakesysfs.Set(sys, "class/powercap/intel-rapl:0/energy_uj", "1003000123"); err != nil {
		t.Fatal(err)
	}
	tick(t, h, done)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	h.exp.mu.Lock()
	defer h.exp.mu.Unlock()
	if h.exp.last == nil {
		t.Fatal("no final export")
	}
	sums := map[string]map[string]float64{}
	var share float64
	for _, sm := range h.exp.last.ScopeMetrics {
		if sm.Scope.Name != agent.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[float64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				id, _ := dp.Attributes.Value(semconv.HwIDKey)
				if sums[id.AsString()] == nil {
					sums[id.AsString()] = map[string]float64{}
				}
				sums[id.AsString()][m.Name] += dp.Value
				if pid, ok := dp.Attributes.Value(semconv.ProcessPIDKey); ok && pid.AsInt64() == 42 && id.AsString() == "intel-rapl:0" && m.Name == "otelenergy.process.energy" {
					share = dp.Value
				}
			}
		}
	}
	// 3 J; idle 1.5 J; 1.5 J active over 100 busy ticks, 60 of them 42's.
	if share != 0.9 || sums["intel-rapl:0"]["hw.energy"] != 3 {
		t.Errorf("package-0: hw.energy %v J, process 42 %v J; want 3 and 0.9", sums["intel-rapl:0"]["hw.energy"], share)
	}
	for id, s := range sums {
		if id == "GPU-test" || id == "" {
			continue
		}
		mj := func(j float64) int64 { return int64(j*1000 + 0.5) }
		if mj(s["otelenergy.process.energy"])+mj(s["otelenergy.energy.idle"])+mj(s["otelenergy.energy.unattributed"]) != mj(s["hw.energy"]) {
			t.Errorf("%s: %v", id, s)
		}
	}
	if len(sums) < 5 {
		t.Errorf("exported hw.ids %v, want the GPU and 4 RAPL domains", sums)
	}
}
