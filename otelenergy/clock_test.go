package otelenergy

import (
	"context"
	"testing"
	"time"
)

// TestClockOneReading: Clock's two scales are one reading of the
// Monitor's clock: on a fake clock, ring is the time since construction
// and wall the clock's time, and a nil Monitor gives zeros.
func TestClockOneReading(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	now := base
	src, err := NewFuncSource([]Device{{ID: "GPU-0", Name: "clock"}}, func(int) (uint64, error) { return 0, nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMonitor(src, WithClock(func() time.Time { return now }), WithMeterProvider(mpNoop()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	now = base.Add(1500 * time.Millisecond)
	ring, wall := m.Clock()
	if ring != int64(1500*time.Millisecond) || !wall.Equal(now) {
		t.Fatalf("Clock() = %d, %v; want 1.5 s, %v", ring, wall, now)
	}
	var nilM *Monitor
	if r, w := nilM.Clock(); r != 0 || !w.IsZero() {
		t.Fatalf("nil Monitor: %d, %v", r, w)
	}
}
