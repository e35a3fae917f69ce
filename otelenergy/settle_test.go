package otelenergy

import (
	"context"
	"testing"
	"time"
)

// TestStuckCounterStillFinalizes reads a counter stuck at one value: no
// read ever sees a step, so only the rule that settles the ledger every
// quarter horizon without one can make an ended request final. It must be
// final within the horizon plus that quarter (and a read interval) of its
// end, and be flagged approximate, since none of its time was metered.
func TestStuckCounterStillFinalizes(t *testing.T) {
	const horizon = 2 * time.Second
	clock := newFakeClock()
	src, err := NewFuncSource([]Device{{ID: "stuck"}}, func(int) (uint64, error) { return 123_456, nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMonitor(src, WithClock(clock.Now), WithHorizon(horizon), WithMeterProvider(mpNoop()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	tick := func() {
		clock.Advance(DefaultInterval)
		m.Sample()
	}
	m.Sample()
	for range 10 {
		tick()
	}
	req := m.StartRequest(context.Background())
	for range 6 {
		tick()
	}
	ended := clock.Now()
	if res := req.End(); res.EnergyMJ != 0 || !res.Approximate {
		t.Fatalf("End on a stuck counter = %+v, want no energy yet and approximate", res)
	}
	limit := horizon + horizon/4 + 2*DefaultInterval
	for !req.st.Final() {
		if clock.Now().Sub(ended) > limit {
			t.Fatalf("request not final %v after its end on a stuck counter; want within %v", clock.Now().Sub(ended), limit)
		}
		tick()
	}
	took := clock.Now().Sub(ended)
	if took < horizon {
		t.Fatalf("request final %v after its end, before the horizon %v: the stuck device did not hold it back", took, horizon)
	}
	if f := req.st.Flags(); f == 0 || req.st.EnergyMJ() != 0 {
		t.Fatalf("final request on a stuck counter: flags %b, %d mJ; want flagged approximate with none", f, req.st.EnergyMJ())
	}
	t.Logf("final %v after its end (horizon %v)", took, horizon)
}
