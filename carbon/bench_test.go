package carbon

import (
	"strconv"
	"sync/atomic"
	"testing"
)

var sinkReading *Reading

// BenchmarkCurrent is the request path's read of the intensity: one
// atomic load. The baseline is a bare atomic.Pointer load.
func BenchmarkCurrent(b *testing.B) {
	r := &Reading{Intensity: Intensity{MgPerKWh: 436_000, Kind: Average, Source: SourceStatic}}
	b.Run("baseline", func(b *testing.B) {
		var p atomic.Pointer[Reading]
		p.Store(r)
		b.ReportAllocs()
		for b.Loop() {
			sinkReading = p.Load()
		}
	})
	b.Run("poller", func(b *testing.B) {
		pl, err := NewPoller(NewStatic(Intensity{MgPerKWh: 436_000}), WithFallback(Intensity{MgPerKWh: 436_000, Kind: Average, Source: SourceStatic}))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			sinkReading = pl.Current()
		}
	})
	b.Run("estimate", func(b *testing.B) {
		pl, err := NewPoller(NewStatic(Intensity{MgPerKWh: 436_000}), WithFallback(Intensity{MgPerKWh: 436_000, Kind: Average, Source: SourceStatic}))
		if err != nil {
			b.Fatal(err)
		}
		m, err := NewModel(pl, WithPUE(1_135_000))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			sinkUG, _ = m.Estimate(60_000)
		}
	})
}

var sinkUG uint64

// BenchmarkOperational is one counter interval's conversion, on the
// sampler's side, for n requests. The baseline sums the same shares: the
// least any split over them must do.
func BenchmarkOperational(b *testing.B) {
	f, err := NewFactor(436_000, 1_135_000)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{64, 1024} {
		shares := make([]uint64, n)
		for i := range shares {
			shares[i] = 900 + uint64(i*37%200)
		}
		out := make([]uint64, n)
		b.Run("baseline/"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var s uint64
				for _, x := range shares {
					s += x
				}
				sinkUG = s
			}
		})
		b.Run("convert/"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkUG = f.Operational(shares, 70, out)
			}
		})
	}
}

// BenchmarkTimeline is the sampler's per-read Note with an unchanged
// reading, and the split's lookup.
func BenchmarkTimeline(b *testing.B) {
	tl := newTimeline(0)
	rs := make([]*Reading, defaultTimelineCapacity)
	for i := range rs {
		rs[i] = &Reading{}
		tl.Note(int64(i)*1e9, rs[i])
	}
	b.Run("Note", func(b *testing.B) {
		b.ReportAllocs()
		t := int64(len(rs)) * 1e9
		for b.Loop() {
			t++
			tl.Note(t, rs[len(rs)-1])
		}
	})
	b.Run("At", func(b *testing.B) {
		b.ReportAllocs()
		var t int64
		for b.Loop() {
			t = (t + 7e8) % (int64(len(rs)) * 1e9)
			sinkReading, _ = tl.At(t)
		}
	})
}
