package agent_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
)

// TestRunFakeClock drives the loop with a ticker the test owns: one pass
// at start, one per tick, none after the context ends, and the ticker is
// stopped on return.
func TestRunFakeClock(t *testing.T) {
	rings := newFakeRings(t)
	mp := sdkmetric.NewMeterProvider()
	defer mp.Shutdown(context.Background())
	ch := &churn{n: 1}
	ag, err := agent.New(agent.Config{Rings: rings, Lister: ch, Resolver: ch, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	ticks := make(chan time.Time)
	stopped := make(chan struct{})
	var gotInterval time.Duration
	newTicker := func(d time.Duration) (<-chan time.Time, func()) {
		gotInterval = d
		return ticks, func() { close(stopped) }
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ag.Run(ctx, 250*time.Millisecond, newTicker) }()
	for i := range 5 {
		rings.push(1000)
		ticks <- time.Unix(int64(i), 0) // unbuffered: the loop has taken it
	}
	cancel()
	<-done
	<-stopped
	if gotInterval != 250*time.Millisecond {
		t.Errorf("ticker interval %v", gotInterval)
	}
	// The first pass, then one per tick: each tick was received before
	// its send returned, and its pass ran before the loop saw the
	// cancellation.
	if got := ag.Passes(); got != 6 {
		t.Fatalf("%d passes, want 6", got)
	}
	if tot := ag.Totals(0); tot.EnergyMJ != 5000 {
		t.Fatalf("split %d mJ, want the 5000 pushed", tot.EnergyMJ)
	}
}
