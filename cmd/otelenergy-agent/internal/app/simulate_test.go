package app_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/app"
)

// TestSimulateMetersHost: -simulate meters the simulated host beside its
// boards, so that the export has hw.energy with hw.type gpu, cpu and
// memory. (Its processes start 3 s in, on the wall clock; the sim
// package's TestSimulatedNode checks their CPU and DRAM energy on a fake
// clock.)
func TestSimulateMetersHost(t *testing.T) {
	h := newHarness()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, config(t), h.logger, h.deps(nil)) }()
	for range 3 {
		h.ticks <- time.Now()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.exp.mu.Lock()
	rm := h.exp.last
	h.exp.mu.Unlock()
	energy := map[string]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[float64]); ok && m.Name == "hw.energy" {
				for _, dp := range s.DataPoints {
					ty, _ := dp.Attributes.Value("hw.type")
					energy[ty.AsString()]++
				}
			}
		}
	}
	if energy["gpu"] != 2 || energy["cpu"] != 2 || energy["memory"] != 2 {
		t.Errorf("hw.energy series by hw.type: %v; want 2 boards, 2 packages and their DRAM", energy)
	}
}
