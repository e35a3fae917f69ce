package otelenergy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/source"
)

// TestClockOneReading: clock's two scales are one reading of the
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
	ring, wall := m.clock()
	if ring != int64(1500*time.Millisecond) || !wall.Equal(now) {
		t.Fatalf("Clock() = %d, %v; want 1.5 s, %v", ring, wall, now)
	}
	var nilM *Monitor
	if r, w := nilM.clock(); r != 0 || !w.IsZero() {
		t.Fatalf("nil Monitor: %d, %v", r, w)
	}
}

// tapped is a source.Tapped over a source with a share: it forwards
// nothing but the Source methods it embeds.
type tapped struct {
	Source
	inner Source
	rings source.Rings
	calls int
}

func (t *tapped) Inner() Source          { return t.inner }
func (t *tapped) Tap(r source.Rings)     { t.rings, t.calls = r, t.calls+1 }
func (t *tapped) Share(int) source.Share { panic("the wrapper's methods are not the Monitor's") }

type sharedSource struct{ Source }

func (sharedSource) Share(int) source.Share {
	return source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.25}
}

// TestTappedSource: a Monitor over a tapped source meters the inner one,
// with the inner one's optional interfaces (here its share), and hands
// the wrapper its rings once: the steps and the clock the node agent
// reads, which otelenergy does not export.
func TestTappedSource(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mj uint64
	base, err := NewFuncSource([]Device{{ID: "GPU-0", Name: "tap"}}, func(int) (uint64, error) { mj += 100; return mj, nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	inner := sharedSource{base}
	w := &tapped{Source: base, inner: inner}
	m, err := NewMonitor(w, WithClock(func() time.Time { return now }), WithMeterProvider(mpNoop()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	if w.calls != 1 || w.rings == nil {
		t.Fatalf("Tap called %d times", w.calls)
	}
	for range 3 {
		now = now.Add(100 * time.Millisecond)
		m.Sample()
	}
	v, err := w.rings.Ring(0)
	if err != nil || v.Len() == 0 {
		t.Fatalf("the tapped ring: %d points, %v", v.Len(), err)
	}
	if _, err := w.rings.Ring(1); !errors.Is(err, ErrInvalidDevice) {
		t.Fatalf("Ring(1) of one device: %v, want ErrInvalidDevice", err)
	}
	if r, wall := w.rings.Clock(); r != int64(300*time.Millisecond) || !wall.Equal(now) {
		t.Fatalf("Clock = %d, %v", r, wall)
	}
	if d := w.rings.Devices(); len(d) != 1 || d[0].ID != "GPU-0" {
		t.Fatalf("Devices = %+v", d)
	}
	if m.sharer == nil {
		t.Fatal("the inner source's share was not used")
	}
	if _, err := NewMonitor(&tapped{Source: base}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a tapped source with no inner one: %v, want ErrInvalidConfig", err)
	}
}
