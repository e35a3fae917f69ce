package ring_test

import (
	"testing"

	"github.com/otelenergy/otelenergy/ring"
)

func TestCursor(t *testing.T) {
	r := mustNew(t, 4)
	v := r.View()
	var c ring.Cursor
	z := ring.FromZero()
	if _, ok := c.Next(v); ok {
		t.Fatal("an interval from an empty ring")
	}
	push := func(ts int64, e uint64) {
		t.Helper()
		if err := r.Push(ring.Point{T: ts, EnergyMJ: e}); err != nil {
			t.Fatal(err)
		}
	}
	push(100, 50)
	if _, ok := c.Next(v); ok {
		t.Fatal("the first point yielded an interval of its own")
	}
	if iv, ok := z.Next(v); !ok || iv != (ring.Interval{T0: 100, T1: 100, EnergyMJ: 50}) {
		t.Fatalf("FromZero's first interval = %+v, %v; want (100, 100] with 50 mJ", iv, ok)
	}
	push(200, 80)
	push(300, 80) // flat: an interval of no energy
	for _, cur := range []*ring.Cursor{&c, &z} {
		if iv, ok := cur.Next(v); !ok || iv != (ring.Interval{T0: 100, T1: 200, EnergyMJ: 30}) {
			t.Fatalf("interval = %+v, %v; want (100, 200] with 30 mJ", iv, ok)
		}
		if iv, ok := cur.Next(v); !ok || iv != (ring.Interval{T0: 200, T1: 300, EnergyMJ: 0}) {
			t.Fatalf("flat interval = %+v, %v", iv, ok)
		}
		if _, ok := cur.Next(v); ok {
			t.Fatal("an interval past the newest point")
		}
	}
	if tt, e := c.Last(); !c.Primed() || tt != 300 || e != 80 || c.Index() != 3 {
		t.Fatalf("Last = %d, %d, Index %d", tt, e, c.Index())
	}
	// The ring laps the cursor: the energy in between is one interval,
	// from the cursor's last point to the oldest point still held.
	for i := int64(4); i <= 9; i++ {
		push(i*100, uint64(i)*10+80)
	}
	old := r.Oldest()
	p, _ := r.At(old)
	iv, ok := c.Next(v)
	if !ok || iv.T0 != 300 || iv.T1 != p.T || iv.EnergyMJ != p.EnergyMJ-80 {
		t.Fatalf("after a lap: %+v, want (300, %d] with %d mJ", iv, p.T, p.EnergyMJ-80)
	}
	// Peek does not move.
	j, q, ok := c.Peek(v)
	if j2, q2, _ := c.Peek(v); !ok || j2 != j || q2 != q {
		t.Fatal("Peek moved the cursor")
	}
	if _, ok := (ring.View{}).At(0); ok || (ring.View{}).Oldest() != 0 {
		t.Fatal("the zero View has points")
	}
}

// FuzzCursor pushes points and walks them with readers that fall behind
// by arbitrary amounts, the ring lapping them: the intervals a cursor
// yields tile the time from the first point it passed, and their energies
// add up to the energy of the newest point less that one's (FromZero: the
// newest point's whole energy).
func FuzzCursor(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint8(3))
	f.Add([]byte{0, 0, 0, 9, 200, 0, 1}, uint8(0))
	f.Fuzz(func(t *testing.T, steps []byte, every uint8) {
		r, _ := ring.New(8)
		v := r.View()
		var c ring.Cursor
		z := ring.FromZero()
		var ts int64
		var e, base uint64
		based := false
		var cT, zT int64 = -1, -1
		var cSum, zSum uint64
		walk := func(cur *ring.Cursor, last *int64, sum *uint64) {
			for {
				iv, ok := cur.Next(v)
				if !ok {
					return
				}
				if *last >= 0 && iv.T0 != *last {
					t.Fatalf("interval %+v does not start where the last ended (%d)", iv, *last)
				}
				if iv.T1 < iv.T0 {
					t.Fatalf("interval %+v runs backwards", iv)
				}
				*last, *sum = iv.T1, *sum+iv.EnergyMJ
			}
		}
		for i, s := range steps {
			ts += int64(s&7) + 1
			e += uint64(s >> 3)
			if err := r.Push(ring.Point{T: ts, EnergyMJ: e}); err != nil {
				t.Fatal(err)
			}
			if every > 0 && i%int(every) == 0 {
				walk(&c, &cT, &cSum)
				walk(&z, &zT, &zSum)
			}
			if !based && c.Primed() {
				_, last := c.Last()
				base, based = last-cSum, true
			}
		}
		walk(&c, &cT, &cSum)
		walk(&z, &zT, &zSum)
		if !based {
			_, last := c.Last()
			base = last - cSum
		}
		if len(steps) == 0 {
			return
		}
		if cSum != e-base || zSum != e {
			t.Fatalf("energies add up to %d and %d (from zero), want %d and %d", cSum, zSum, e-base, e)
		}
	})
}
