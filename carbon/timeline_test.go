package carbon

import (
	"sync"
	"testing"
)

func TestTimelineSteps(t *testing.T) {
	a := &Reading{Intensity: Intensity{MgPerKWh: 1}}
	b := &Reading{Intensity: Intensity{MgPerKWh: 2}}
	c := &Reading{Intensity: Intensity{MgPerKWh: 3}}
	tl := newTimeline(3)
	if r, ok := tl.At(0); r != nil || ok {
		t.Fatalf("empty timeline: %v, %v", r, ok)
	}
	steps := []struct {
		name   string
		noteAt int64
		note   *Reading
		at     int64
		want   *Reading
		wantOK bool
	}{
		{name: "first change", noteAt: 100, note: a, at: 100, want: a, wantOK: true},
		{name: "before the first", noteAt: 110, note: a, at: 50, want: a, wantOK: false},
		{name: "same reading adds nothing", noteAt: 120, note: a, at: 119, want: a, wantOK: true},
		{name: "second change", noteAt: 200, note: b, at: 199, want: a, wantOK: true},
		{name: "at the change", noteAt: 200, note: b, at: 200, want: b, wantOK: true},
		{name: "going back is clamped", noteAt: 150, note: c, at: 199, want: a, wantOK: true},
		{name: "an interval ending at the newest instant keeps its reading", noteAt: 150, note: c, at: 200, want: b, wantOK: true},
		{name: "the clamped change is in force just after it", noteAt: 210, note: c, at: 201, want: c, wantOK: true},
		{name: "a change at the newest instant starts just after it", noteAt: 210, note: nil, at: 210, want: c, wantOK: true},
		{name: "none", noteAt: 300, note: nil, at: 300, want: nil, wantOK: true},
		{name: "full: the oldest drops", noteAt: 400, note: a, at: 150, want: c, wantOK: false},
		{name: "newest", noteAt: 500, note: a, at: 1 << 40, want: a, wantOK: true},
	}
	for _, s := range steps {
		tl.Note(s.noteAt, s.note)
		r, ok := tl.At(s.at)
		if r != s.want || ok != s.wantOK {
			t.Errorf("%s: At(%d) = %v, %v; want %v, %v", s.name, s.at, r, ok, s.want, s.wantOK)
		}
	}
}

// FuzzTimeline checks the ring against a plain list of every change.
func FuzzTimeline(f *testing.F) {
	f.Add([]byte{0, 1, 5, 2, 3, 1, 9, 0, 200, 4})
	f.Fuzz(func(t *testing.T, ops []byte) {
		readings := []*Reading{nil, {}, {}, {}}
		const capacity = 4
		tl := newTimeline(capacity)
		type entry struct {
			at int64
			r  *Reading
		}
		var ref []entry // every change, never dropped
		var last int64
		for i := 0; i+1 < len(ops); i += 2 {
			t0 := int64(ops[i])
			r := readings[int(ops[i+1])%len(readings)]
			if ops[i+1]&0x80 != 0 { // a lookup
				want, wantOK := (*Reading)(nil), false
				j := -1
				for k := range ref {
					if ref[k].at <= t0 {
						j = k
					}
				}
				// Only the newest `capacity` changes are kept.
				oldest := max(len(ref)-capacity, 0)
				switch {
				case len(ref) == 0:
				case j < oldest:
					want = ref[oldest].r
				default:
					want, wantOK = ref[j].r, true
				}
				got, ok := tl.At(t0)
				if got != want || ok != wantOK {
					t.Fatalf("At(%d) = %p, %v; want %p, %v (ref %v)", t0, got, ok, want, wantOK, ref)
				}
				continue
			}
			tl.Note(t0, r)
			// The reference: a change at or before the newest instant
			// noted starts 1 ns after it, so no lookup ever changes.
			switch {
			case len(ref) > 0 && ref[len(ref)-1].r == r:
				last = max(last, t0)
			case len(ref) > 0 && t0 <= last:
				last++
				ref = append(ref, entry{last, r})
			default:
				last = t0
				ref = append(ref, entry{t0, r})
			}
		}
	})
}

func TestTimelineConcurrentSafe(t *testing.T) {
	tl := newTimeline(8)
	rs := []*Reading{{}, {}, {}}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 10_000 {
			tl.Note(int64(i), rs[i/100%3])
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 10_000 {
			if r, _ := tl.At(int64(i)); r != nil && r != rs[0] && r != rs[1] && r != rs[2] {
				t.Errorf("At returned a reading never noted")
				return
			}
		}
	}()
	wg.Wait()
}
