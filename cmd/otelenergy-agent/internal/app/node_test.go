package app_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/app"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/procfs"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// board is one GPU whose counter the test sets, running one process, pid
// 42. Once hang is set, a read blocks until release is closed, holding mu
// as NVML's source holds its lock, so that a Close waits for it.
type board struct {
	mu      sync.RWMutex
	mj      atomic.Uint64
	hang    atomic.Bool
	release chan struct{}
	closed  atomic.Int32
}

func newBoard() *board {
	b := &board{release: make(chan struct{})}
	b.mj.Store(1000)
	return b
}

func (b *board) Kind() string { return "custom" }
func (b *board) Devices() []otelenergy.Device {
	return []otelenergy.Device{{ID: "GPU-test", Name: "test", Vendor: "NVIDIA", MaxWatts: 1e9}}
}

func (b *board) ReadEnergy(int) (uint64, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.hang.Load() {
		<-b.release
	}
	return b.mj.Load(), nil
}

func (b *board) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed.Add(1)
	return nil
}

func (b *board) Read(_ int, bp *nvmlsource.BoardProcesses) error {
	bp.Reset()
	bp.Utilization = nvmlsource.UtilUnsupported
	bp.Processes = append(bp.Processes, nvmlsource.ProcessUsage{Pid: 42, Listed: true})
	return nil
}

func (b *board) StartTime(uint32) (uint64, error) { return 5, nil }
func (b *board) Info(uint32) (procfs.Info, error) {
	return procfs.Info{StartTime: 5, Name: "fake"}, nil
}

func (b *board) node(flags.Config, *slog.Logger) (app.Node, error) {
	return app.Node{Source: b, Lister: b, Resolver: b}, nil
}

func boardConfig(t *testing.T, sample string) flags.Config {
	cfg, err := flags.Parse([]string{"-sample-interval", sample, "-idle-watts", "1", "-admin-listen", ""}, func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// tick makes a pass, or fails with Run's error.
func tick(t *testing.T, h *harness, done <-chan error) {
	t.Helper()
	select {
	case h.ticks <- time.Now():
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	}
}

// agentSums returns the final export's sums of the agent's hw.energy and
// otelenergy.process.energy, in J.
func (e *exporter) agentSums() (hw, procs float64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		return 0, 0, false
	}
	for _, sm := range e.last.ScopeMetrics {
		if sm.Scope.Name != agent.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			sum, isSum := m.Data.(metricdata.Sum[float64])
			if !isSum {
				continue
			}
			for _, dp := range sum.DataPoints {
				switch m.Name {
				case "hw.energy":
					hw += dp.Value
					ok = true
				case "otelenergy.process.energy":
					procs += dp.Value
				}
			}
		}
	}
	return hw, procs, ok
}

// TestFinalPassSplitsLastSteps runs the agent with a sampler that reads
// only at its start, steps the counter by 1.5 J, and ends the run: the
// final export's hw.energy is those 1.5 J, from the shutdown's own sample,
// and the process got its share of them.
func TestFinalPassSplitsLastSteps(t *testing.T) {
	h, b := newHarness(), newBoard()
	d := h.deps(nil)
	d.OpenNode = b.node
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, boardConfig(t, "5s"), h.logger, d) }()
	tick(t, h, done) // a pass over the start's sample: nothing to split
	time.Sleep(20 * time.Millisecond)
	b.mj.Add(1500)
	tick(t, h, done)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	hw, procs, ok := h.exp.agentSums()
	if !ok || hw != 1.5 {
		t.Fatalf("the final export's hw.energy: %v J (exported %v), want 1.5", hw, ok)
	}
	if procs <= 0 || procs > hw {
		t.Fatalf("the process's energy: %v J of %v", procs, hw)
	}
	if n := b.closed.Load(); n != 1 {
		t.Fatalf("the source closed %d times", n)
	}
}

// TestShutdownHungSource hangs the source's reads as the run ends: Run
// returns within its shutdown timeout, names the services the hang held,
// and the telemetry's final export still goes out.
func TestShutdownHungSource(t *testing.T) {
	h, b := newHarness(), newBoard()
	d := h.deps(nil)
	d.OpenNode = b.node
	d.ShutdownTimeout = 400 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, boardConfig(t, "10ms"), h.logger, d) }()
	tick(t, h, done)
	b.hang.Store(true)
	time.Sleep(50 * time.Millisecond) // the sampler's next read hangs
	began := time.Now()
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		close(b.release)
		<-done
		t.Fatal("Run still shutting down 10 s after a 400 ms timeout")
	}
	el := time.Since(began)
	close(b.release)
	if el > 2*time.Second {
		t.Errorf("shutdown took %v, timeout 400 ms", el)
	}
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Errorf("Run: %v", err)
	}
	if _, _, ok := h.exp.agentSums(); !ok {
		t.Errorf("no final export: %q", h.exp.metrics())
	}
	// The monitor closes the source once the hung read returns.
	for deadline := time.Now().Add(5 * time.Second); b.closed.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := b.closed.Load(); n != 1 {
		t.Errorf("the source closed %d times after the read returned", n)
	}
}

// TestRealStartFailures fails the real start functions, not a hook: each
// failure names its stage and wraps the cause, and what started before is
// stopped.
func TestRealStartFailures(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		stage, want string
		set         func(*app.Deps)
	}{
		{"telemetry", "failed to start telemetry: metric exporter: boom", func(d *app.Deps) {
			d.NewReader = func(context.Context) (sdkmetric.Reader, error) { return nil, boom }
		}},
		{"GPU source", "failed to start GPU source: boom", func(d *app.Deps) {
			d.OpenNode = func(flags.Config, *slog.Logger) (app.Node, error) { return app.Node{}, boom }
		}},
		{"admin server", "failed to start admin server: -admin-listen: boom", func(d *app.Deps) {
			d.Listen = func(string, string) (net.Listener, error) { return nil, boom }
		}},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			h := newHarness()
			d := h.deps(nil)
			tc.set(&d)
			err := app.Run(context.Background(), config(t), h.logger, d)
			if !errors.Is(err, boom) || err.Error() != tc.want {
				t.Fatalf("Run: %v, want %q", err, tc.want)
			}
			// The GPU source starts first and stops last.
			if len(h.stops) == 0 && tc.stage != "GPU source" || len(h.stops) > 0 && h.stops[len(h.stops)-1] != "GPU source" {
				t.Fatalf("stopped %q", h.stops)
			}
		})
	}
}
