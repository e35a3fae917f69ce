package idlepower_test

import (
	"math"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/idlepower"
)

const s = int64(time.Second)

// TestThreshold pins the one threshold: the mean is measured once two
// seconds of idle time have been seen, not before.
func TestThreshold(t *testing.T) {
	var m idlepower.Mean
	for i := range 19 { // 1.9 s of 100 ms stretches at 70 W
		m.Forget(int64(i) * s / 10)
		m.Add(0.1, 7000)
	}
	if _, ok := m.Watts(); ok {
		t.Fatal("measured after 1.9 s of idle time")
	}
	if w, ok := m.Provisional(); !ok || math.Abs(w-70) > 1e-9 {
		t.Fatalf("Provisional = %v, %v; want 70", w, ok)
	}
	m.Add(0.1, 7000)
	if w, ok := m.Watts(); !ok || math.Abs(w-70) > 1e-9 {
		t.Fatalf("Watts after 2 s = %v, %v; want 70, measured", w, ok)
	}
	if idlepower.MinSeconds != 2 {
		t.Fatalf("MinSeconds = %v, the documented 2 s", idlepower.MinSeconds)
	}
}

// TestMin: a Mean whose Min is set is measured after Min seconds of idle
// time instead of MinSeconds; a Min of zero or less is the default.
func TestMin(t *testing.T) {
	for _, c := range []struct {
		min, after float64 // Min, and the idle seconds it is measured after
	}{{0.5, 0.5}, {0, idlepower.MinSeconds}, {-1, idlepower.MinSeconds}} {
		m := idlepower.Mean{Min: c.min}
		steps := int(math.Round(c.after / 0.1))
		for i := range steps - 1 {
			m.Forget(int64(i) * s / 10)
			m.Add(0.1, 7000)
		}
		if _, ok := m.Watts(); ok {
			t.Fatalf("Min %v: measured after %.1f s", c.min, float64(steps-1)/10)
		}
		m.Add(0.1, 7000)
		if w, ok := m.Watts(); !ok || math.Abs(w-70) > 1e-9 {
			t.Fatalf("Min %v: Watts after %.1f s = %v, %v; want 70, measured", c.min, c.after, w, ok)
		}
	}
}

// TestForget: sums decay by e^(−Δt/horizon); the measurement, made once,
// stays made, and the mean follows a new level.
func TestForget(t *testing.T) {
	m := idlepower.Mean{Horizon: 100 * time.Second}
	m.Forget(1)
	m.Add(10, 900_000) // 10 s at 90 W
	m.Forget(1 + 100*s)
	if got, want := m.Seconds(), 10*math.Exp(-1); math.Abs(got-want) > 1e-9 {
		t.Fatalf("Seconds after one horizon = %v, want %v", got, want)
	}
	if w, ok := m.Watts(); !ok || math.Abs(w-90) > 1e-9 {
		t.Fatalf("Watts = %v, %v; want 90, still measured", w, ok)
	}
	m.Forget(1 + 5000*s)
	m.Add(10, 600_000) // 60 W now
	if w, _ := m.Watts(); math.Abs(w-60) > 1e-6 {
		t.Fatalf("Watts after fifty horizons at 60 W = %v, want 60", w)
	}
	m.Forget(10) // backwards: nothing
	if w, _ := m.Watts(); math.Abs(w-60) > 1e-6 {
		t.Fatalf("a clock going back moved the mean to %v", w)
	}
}

func TestBadStretches(t *testing.T) {
	var m idlepower.Mean
	for _, st := range [][2]float64{{0, 5}, {-1, 5}, {math.NaN(), 5}, {1, math.NaN()}, {1, -5}, {math.Inf(1), 1}, {1, math.Inf(1)}} {
		m.Add(st[0], st[1])
	}
	if _, ok := m.Provisional(); ok || m.Seconds() != 0 {
		t.Fatalf("bad stretches were added: %v s", m.Seconds())
	}
}
