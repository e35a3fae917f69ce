package otelenergy

import (
	"testing"
	"time"
)

// stampedSource is a counter that steps by 100 mJ every 20 ms, 5 ms into
// each period, and stamps each value with its step's instant on a device
// clock 1000 s behind the Monitor's.
type stampedSource struct {
	now   func() time.Time
	epoch time.Time
}

const stampOffset = int64(1000 * time.Second)

func (s *stampedSource) step() int64 {
	ns := int64(s.now().Sub(s.epoch))
	if ns < int64(5*time.Millisecond) {
		return -1
	}
	return (ns - int64(5*time.Millisecond)) / int64(20*time.Millisecond)
}

func (s *stampedSource) Kind() string      { return "custom" }
func (s *stampedSource) Devices() []Device { return []Device{{ID: "stamped"}} }
func (s *stampedSource) Close() error      { return nil }
func (s *stampedSource) ReadEnergy(int) (uint64, error) {
	mj, _, err := s.ReadEnergyStamped(0)
	return mj, err
}

func (s *stampedSource) ReadEnergyStamped(int) (uint64, uint64, error) {
	k := s.step()
	at := k*int64(20*time.Millisecond) + int64(5*time.Millisecond)
	return uint64(100 * (k + 1)), uint64(at + stampOffset), nil
}

// TestStampedSteps: a source that stamps its counter's updates has its
// steps placed at the stamps, mapped onto the Monitor's clock, not at the
// reads that saw them.
func TestStampedSteps(t *testing.T) {
	clk := newFakeClock()
	src := &stampedSource{now: clk.Now, epoch: clk.Now()}
	m, err := NewMonitor(src, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(t.Context())
	for range 400 {
		clk.Advance(17 * time.Millisecond)
		m.Sample()
	}
	v, err := m.view(0)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for k := range 50 {
		p, ok := v.Back(k)
		if !ok {
			t.Fatal("ring too short")
		}
		// The ring's times count from the Monitor's epoch, as the source's
		// do.
		if off := (p.T - int64(5*time.Millisecond)) % int64(20*time.Millisecond); off != 0 {
			t.Errorf("step %d at %v, %v after a counter update", k, time.Duration(p.T), time.Duration(off))
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no step checked")
	}
}
