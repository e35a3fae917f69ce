package carbon

import (
	"errors"
	"math"
	"math/big"
	"testing"
	"time"
)

func TestParsePUE(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want PUE
		err  bool
	}{
		{in: "1", want: 1_000_000},
		{in: "1.135", want: 1_135_000},
		{in: " 1.1 ", want: 1_100_000},
		{in: "1.185000", want: 1_185_000},
		{in: "1.0000001", err: true}, // beyond ppm: not exact
		{in: "0.9", err: true},
		{in: "101", err: true},
		{in: "1e0", err: true},
		{in: "3/2", err: true},
		{in: "", err: true},
		{in: "abc", err: true},
		{in: "-1.2", err: true},
		{in: "+1.2", err: true},
		{in: "0x1", err: true},
		{in: "0b1", err: true},
		{in: "1_0", err: true},
		{in: "1.", err: true},
		{in: ".5", err: true},
		{in: "1.2.3", err: true},
	} {
		got, err := ParsePUE(tt.in)
		if tt.err {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("ParsePUE(%q) = %v, %v; want ErrInvalidConfig", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParsePUE(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if s := PUE(1_135_000).String(); s != "1.135" {
		t.Errorf("String = %q", s)
	}
	if s := PUENone.String(); s != "1" {
		t.Errorf("String = %q", s)
	}
}

func TestParseGramsPerKWh(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		err  bool
	}{
		{in: "436", want: 436_000},
		{in: "52.5", want: 52_500},
		{in: "0", want: 0},
		{in: "0.001", want: 1},
		{in: "0.0001", err: true},
		{in: "10001", err: true},
		{in: "-5", err: true},
		{in: "NaN", err: true},
		{in: "0x1b4", err: true}, // big.Rat reads it as 436
		{in: "0b111", err: true},
		{in: "0o7", err: true},
		{in: "4_36", err: true},
		{in: "436e0", err: true},
		{in: "872/2", err: true},
		{in: "+436", err: true},
		{in: "Inf", err: true},
	} {
		got, err := ParseGramsPerKWh(tt.in)
		if tt.err != (err != nil) || got != tt.want {
			t.Errorf("ParseGramsPerKWh(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.err)
		}
	}
	if got, err := ParseGramsPerHour("12.5"); err != nil || got != 12_500_000 {
		t.Errorf("ParseGramsPerHour(12.5) = %v, %v", got, err)
	}
	for _, in := range []string{"0x10", "1_000", "1e3", "-1", "1/2", ""} {
		if got, err := ParseGramsPerHour(in); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("ParseGramsPerHour(%q) = %v, %v; want ErrInvalidConfig", in, got, err)
		}
	}
}

// TestFactorOf checks the conversion against figures worked by hand.
func TestFactorOf(t *testing.T) {
	for _, tt := range []struct {
		name string
		g    string // g/kWh
		pue  string
		mJ   uint64
		want uint64 // µg
	}{
		// 1 kWh at 436 g/kWh and PUE 1.135: 494.86 g.
		{"a kWh", "436", "1.135", 3_600_000_000, 494_860_000},
		// 1 J at 400 g/kWh: 400/3.6e6 g = 111.11 µg.
		{"a joule", "400", "1", 1000, 111},
		// 4.5 J at 400 g/kWh: 500 µg exactly.
		{"exact", "400", "1", 4500, 500},
		// 1 J at 1.8 g/kWh, PUE 1: 0.5 µg, rounds half up to 1.
		{"half rounds up", "1.8", "1", 1000, 1},
		// Just below half: 1 J at 1.799 g/kWh = 0.49972 µg.
		{"below half", "1.799", "1", 1000, 0},
		{"zero intensity", "0", "1.5", 1 << 40, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mg, err := ParseGramsPerKWh(tt.g)
			if err != nil {
				t.Fatal(err)
			}
			p, err := ParsePUE(tt.pue)
			if err != nil {
				t.Fatal(err)
			}
			f, err := NewFactor(mg, p)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Of(tt.mJ); got != tt.want {
				t.Errorf("Of(%d) = %d µg, want %d", tt.mJ, got, tt.want)
			}
		})
	}
	if _, err := NewFactor(maxMgPerKWh+1, PUENone); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewFactor above 10 kg/kWh: %v", err)
	}
	if _, err := NewFactor(1, 0); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewFactor with PUE 0: %v", err)
	}
	// Saturates, never wraps or panics.
	f, _ := NewFactor(maxMgPerKWh, maxPUEPPM)
	if got := f.Of(math.MaxUint64); got != math.MaxUint64 {
		t.Errorf("Of(max) = %d, want saturation", got)
	}
}

// ratRound is round(x), half up, for x ≥ 0.
func ratRound(x *big.Rat) *big.Int {
	n := new(big.Int).Mul(x.Num(), big.NewInt(2))
	n.Add(n, x.Denom())
	return n.Div(n, new(big.Int).Mul(x.Denom(), big.NewInt(2)))
}

// exactUG is mJ × mg/kWh × ppm / 3.6e12 as a rational.
func exactUG(mJ, mg uint64, p PUE) *big.Rat {
	n := new(big.Int).SetUint64(mJ)
	n.Mul(n, new(big.Int).SetUint64(mg))
	n.Mul(n, new(big.Int).SetUint64(uint64(p)))
	return new(big.Rat).SetFrac(n, big.NewInt(3_600_000_000_000))
}

// checkOperational checks one interval's conversion against math/big:
// each request's µg is round(exact cumulative) − round(exact previous
// cumulative), hence within 1 µg of its exact share, and the parts add up
// to the interval's emissions rounded once.
func checkOperational(t *testing.T, shares []uint64, unattr, mg uint64, p PUE) {
	t.Helper()
	f, err := NewFactor(mg, p)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint64, len(shares))
	u := f.Operational(shares, unattr, out)
	var cum uint64
	prev := big.NewInt(0)
	sum := new(big.Int)
	for i, s := range shares {
		cum += s
		r := ratRound(exactUG(cum, mg, p))
		want := new(big.Int).Sub(r, prev)
		if !want.IsUint64() || want.Uint64() != out[i] {
			t.Fatalf("request %d of %v at %d mg/kWh, PUE %v: %d µg, want %v", i, shares, mg, p, out[i], want)
		}
		exact := exactUG(s, mg, p)
		diff := new(big.Rat).Sub(new(big.Rat).SetUint64(out[i]), exact)
		if diff.Abs(diff).Cmp(big.NewRat(1, 1)) >= 0 {
			t.Fatalf("request %d: %d µg is 1 µg or more from its exact %v", i, out[i], exact.FloatString(3))
		}
		prev = r
		sum.Add(sum, new(big.Int).SetUint64(out[i]))
	}
	sum.Add(sum, new(big.Int).SetUint64(u))
	total := ratRound(exactUG(cum+unattr, mg, p))
	if sum.Cmp(total) != 0 {
		t.Fatalf("Σ requests + unattributed = %v µg, want round(E·I·PUE) = %v", sum, total)
	}
	if f.Of(cum+unattr) != total.Uint64() {
		t.Fatalf("Of = %d, want %v", f.Of(cum+unattr), total)
	}
}

func TestOperationalConservation(t *testing.T) {
	for _, tt := range []struct {
		name   string
		shares []uint64
		unattr uint64
		g      uint64
		p      PUE
	}{
		{"one request", []uint64{60_000}, 0, 436_000, 1_135_000},
		{"batch of 64 at 100 ms", repeat(937, 64), 32, 436_000, 1_100_000},
		{"tiny shares", []uint64{1, 1, 1, 1, 1}, 0, 400_000, PUENone},
		{"idle interval", nil, 70_000, 52_000, 1_185_000},
		{"zero shares", []uint64{0, 5000, 0}, 10, 700_000, PUENone},
	} {
		t.Run(tt.name, func(t *testing.T) { checkOperational(t, tt.shares, tt.unattr, tt.g, tt.p) })
	}
}

func repeat(v uint64, n int) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// FuzzOperational checks the per-interval conversion against exact
// rationals for arbitrary shares, intensities and PUEs.
func FuzzOperational(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint64(70), uint64(436_000), uint64(1_135_000))
	f.Add([]byte{255, 255, 255, 255}, uint64(0), uint64(1), uint64(1_000_000))
	f.Add([]byte{}, uint64(1<<40), uint64(maxMgPerKWh), uint64(maxPUEPPM))
	f.Fuzz(func(t *testing.T, raw []byte, unattr, mg, p uint64) {
		mg %= maxMgPerKWh + 1
		p = ppmPerUnit + p%(maxPUEPPM-ppmPerUnit+1)
		unattr %= 1 << 44
		// Shares of up to 2^24 mJ each (16 kJ per 100 ms is 160 kW).
		var shares []uint64
		for i := 0; i+2 < len(raw) && len(shares) < 256; i += 3 {
			shares = append(shares, uint64(raw[i])|uint64(raw[i+1])<<8|uint64(raw[i+2])<<16)
		}
		checkOperational(t, shares, unattr, mg, PUE(p))
	})
}

// FuzzEmbodied checks the split of embodied emissions by device time
// against exact rationals.
func FuzzEmbodied(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6}, uint64(100), uint64(12_500_000))
	f.Fuzz(func(t *testing.T, raw []byte, idle, perHour uint64) {
		perHour %= maxUGPerHour + 1
		idle %= uint64(time.Hour)
		var cover []uint64
		for i := 0; i+2 < len(raw) && len(cover) < 256; i += 3 {
			cover = append(cover, uint64(raw[i])|uint64(raw[i+1])<<8|uint64(raw[i+2])<<16)
		}
		e := Embodied(perHour)
		out := make([]uint64, len(cover))
		rest := e.Split(cover, idle, out)
		sum := rest
		var cum uint64
		prev := big.NewInt(0)
		for i, c := range cover {
			cum += c
			r := ratRound(new(big.Rat).SetFrac(new(big.Int).Mul(new(big.Int).SetUint64(cum), new(big.Int).SetUint64(perHour)), big.NewInt(int64(time.Hour))))
			if want := new(big.Int).Sub(r, prev); want.Uint64() != out[i] {
				t.Fatalf("request %d: %d µg, want %v", i, out[i], want)
			}
			prev = r
			sum += out[i]
		}
		if want := e.Of(time.Duration(cum + idle)); sum != want {
			t.Fatalf("Σ = %d µg, want %d", sum, want)
		}
	})
}

// TestEmbodiedOf: 12.5 g per device-hour for 100 ms is 347.2 µg.
func TestEmbodiedOf(t *testing.T) {
	ug, err := ParseGramsPerHour("12.5")
	if err != nil {
		t.Fatal(err)
	}
	if got := Embodied(ug).Of(100 * time.Millisecond); got != 347 {
		t.Errorf("Of(100ms) = %d µg, want 347", got)
	}
	if got := Embodied(ug).Of(-time.Second); got != 0 {
		t.Errorf("Of(-1s) = %d", got)
	}
}

func TestMilligrams(t *testing.T) {
	for _, tt := range []struct{ ug, mg uint64 }{
		{0, 0}, {499, 0}, {500, 1}, {1499, 1}, {1500, 2}, {6_666_667, 6667},
	} {
		if got := Milligrams(tt.ug); got != tt.mg {
			t.Errorf("Milligrams(%d) = %d, want %d", tt.ug, got, tt.mg)
		}
	}
}

// TestIntensityChangeMidRequest: a request that spans an intensity change
// gets each interval at the intensity noted in force at its end, so its
// figure integrates both values exactly, while the other requests in the
// same intervals never see two intensities in one interval.
func TestIntensityChangeMidRequest(t *testing.T) {
	const ms = int64(time.Millisecond)
	low := &Reading{Intensity: Intensity{MgPerKWh: 52_000, Kind: Average, Source: SourceStatic}}
	high := &Reading{Intensity: Intensity{MgPerKWh: 710_000, Kind: Average, Source: SourceStatic}}
	tl := newTimeline(0)
	// The sampler reads every 17 ms and notes the poller's reading; the
	// provider's figure changes between the reads at 153 and 170 ms.
	for t := int64(0); t <= 340*ms; t += 17 * ms {
		r := low
		if t >= 170*ms {
			r = high
		}
		tl.Note(t, r)
	}
	pue := PUE(1_200_000)
	// Ten 34 ms counter intervals; request A runs through all of them,
	// request B only through the first four, and 5 mJ of each is
	// unattributed.
	type interval struct {
		end  int64
		a, b uint64
	}
	var ivs []interval
	for k := int64(1); k <= 10; k++ {
		iv := interval{end: k * 34 * ms, a: 20_000 + uint64(k)*997}
		if k <= 4 {
			iv.b = 13_000
		}
		ivs = append(ivs, iv)
	}
	var gotA uint64
	exactA := new(big.Rat)
	wantA := new(big.Int)
	usedLow, usedHigh := false, false
	for _, iv := range ivs {
		r, ok := tl.At(iv.end)
		if !ok {
			t.Fatalf("no intensity noted at %d", iv.end)
		}
		if want := map[bool]*Reading{true: high, false: low}[iv.end >= 170*ms]; r != want {
			t.Fatalf("interval ending at %d ms: %d mg/kWh, want %d", iv.end/ms, r.MgPerKWh, want.MgPerKWh)
		}
		usedLow = usedLow || r == low
		usedHigh = usedHigh || r == high
		f, err := NewFactor(r.MgPerKWh, pue)
		if err != nil {
			t.Fatal(err)
		}
		shares := []uint64{iv.a, iv.b}
		out := make([]uint64, 2)
		u := f.Operational(shares, 5, out)
		if out[0]+out[1]+u != f.Of(iv.a+iv.b+5) {
			t.Fatalf("interval ending at %d: not conserved", iv.end)
		}
		gotA += out[0]
		exactA.Add(exactA, exactUG(iv.a, r.MgPerKWh, pue))
		wantA.Add(wantA, ratRound(exactUG(iv.a, r.MgPerKWh, pue)))
	}
	if !usedLow || !usedHigh {
		t.Fatalf("the request did not span the change")
	}
	// A is first in every interval, so each of its figures is its exact
	// share rounded once.
	if gotA != wantA.Uint64() {
		t.Errorf("request A: %d µg, want %v (Σ of each interval's exact share, rounded)", gotA, wantA)
	}
	diff := new(big.Rat).Sub(new(big.Rat).SetUint64(gotA), exactA)
	if diff.Abs(diff).Cmp(big.NewRat(int64(len(ivs)), 2)) > 0 {
		t.Errorf("request A: %d µg, exact %s: more than half a µg per interval apart", gotA, exactA.FloatString(3))
	}
	// Either intensity alone is far off: the change matters.
	var allLow, allHigh uint64
	for _, iv := range ivs {
		fl, _ := NewFactor(low.MgPerKWh, pue)
		fh, _ := NewFactor(high.MgPerKWh, pue)
		allLow += fl.Of(iv.a)
		allHigh += fh.Of(iv.a)
	}
	if !(allLow < gotA && gotA < allHigh) {
		t.Errorf("request A: %d µg, not between the all-low %d and all-high %d figures", gotA, allLow, allHigh)
	}
	t.Logf("request A: %d µg (exact %s); all at 52 g/kWh %d, all at 710 g/kWh %d", gotA, exactA.FloatString(3), allLow, allHigh)
}
