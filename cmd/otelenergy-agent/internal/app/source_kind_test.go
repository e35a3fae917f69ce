package app_test

import (
	"context"
	"testing"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/app"
)

// TestResourceNamesSourceKind: the telemetry stage labels the resource
// otelenergy.source=nvml before any source is opened, so a node metered
// through another source (here the fake board, Kind "custom"; in
// production AMD SMI or Intel hwmon picked by -sources auto) exports
// every series under otelenergy.source=nvml.
// TestResourceNamesSourceKind: the resource's otelenergy.source is the kind
// of the source metered, not NVML's by default.
func TestResourceNamesSourceKind(t *testing.T) {
	h, b := newHarness(), newBoard()
	d := h.deps(nil)
	d.OpenNode = b.node
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, boardConfig(t, "5s"), h.logger, d) }()
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
	v, _ := h.exp.last.Resource.Set().Value("otelenergy.source")
	if got := v.AsString(); got != b.Kind() {
		t.Errorf("resource otelenergy.source = %q; the metered source is %q", got, b.Kind())
	}
}
