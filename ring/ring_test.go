package ring_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/otelenergy/otelenergy/ring"
)

func mustNew(tb testing.TB, n int) *ring.Ring {
	tb.Helper()
	r, err := ring.New(n)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func TestNewCapacity(t *testing.T) {
	tests := []struct {
		name    string
		in      int
		wantCap int
		wantErr bool
	}{
		{name: "negative", in: -1, wantErr: true},
		{name: "zero", in: 0, wantErr: true},
		{name: "one", in: 1, wantErr: true},
		{name: "two", in: 2, wantCap: 2},
		{name: "rounds up", in: 1000, wantCap: 1024},
		{name: "default", in: ring.DefaultCapacity, wantCap: 8192},
		{name: "too large", in: 1<<24 + 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ring.New(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ring.ErrCapacity) {
					t.Fatalf("New(%d) error = %v, want ErrCapacity", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Cap() != tt.wantCap || r.Len() != 0 {
				t.Fatalf("Cap=%d Len=%d, want %d and 0", r.Cap(), r.Len(), tt.wantCap)
			}
		})
	}
}

func TestRingQueries(t *testing.T) {
	r := mustNew(t, 4) // 3 visible points
	if _, ok := r.AtOrBefore(0); ok {
		t.Fatal("AtOrBefore on an empty ring returned a point")
	}
	if _, ok := r.Back(0); ok {
		t.Fatal("Back(0) on an empty ring returned a point")
	}
	for i := int64(1); i <= 5; i++ { // times 10..50; 20, 30 dropped at the end
		if err := r.Push(ring.Point{T: i * 10, EnergyMJ: uint64(i) * 100, Tokens: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if r.Len() != 3 || r.Written() != 5 {
		t.Fatalf("Len=%d Written=%d, want 3 and 5", r.Len(), r.Written())
	}
	at := []struct {
		name  string
		t     int64
		wantT int64
	}{
		{name: "before every point gives the oldest", t: 0, wantT: 30},
		{name: "exact oldest", t: 30, wantT: 30},
		{name: "between points", t: 45, wantT: 40},
		{name: "exact newest", t: 50, wantT: 50},
		{name: "after every point gives the newest", t: math.MaxInt64, wantT: 50},
	}
	for _, tt := range at {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := r.AtOrBefore(tt.t)
			if !ok || p.T != tt.wantT || p.EnergyMJ != uint64(tt.wantT)*10 || p.Tokens != uint64(tt.wantT)/10 {
				t.Fatalf("AtOrBefore(%d) = %+v, %v; want the point at %d", tt.t, p, ok, tt.wantT)
			}
		})
	}
	for k, wantT := range []int64{50, 40, 30} {
		if p, ok := r.Back(k); !ok || p.T != wantT {
			t.Fatalf("Back(%d) = %+v, %v; want T=%d", k, p, ok, wantT)
		}
	}
	for _, k := range []int{-1, 3} {
		if _, ok := r.Back(k); ok {
			t.Fatalf("Back(%d) returned a point", k)
		}
	}
	if err := r.Push(ring.Point{T: 49}); !errors.Is(err, ring.ErrTimeBackwards) {
		t.Fatalf("Push backwards error = %v", err)
	}
	if err := r.Push(ring.Point{T: 50, EnergyMJ: 500, Tokens: 5}); err != nil {
		t.Fatalf("Push at an equal time: %v", err)
	}
}

func TestJoulesPerToken(t *testing.T) {
	tests := []struct {
		name   string
		mj, tk uint64
		want   float64
		ok     bool
	}{
		{name: "ordinary", mj: 3000, tk: 10, want: 0.3, ok: true},
		{name: "no tokens", mj: 3000, tk: 0},
		{name: "no energy", mj: 0, tk: 10},
		{name: "both zero", mj: 0, tk: 0},
		{name: "extremes", mj: math.MaxUint64, tk: 1, want: float64(math.MaxUint64) / 1000, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ring.JoulesPerToken(tt.mj, tt.tk)
			if ok != tt.ok || got != tt.want || math.IsNaN(got) || math.IsInf(got, 0) {
				t.Fatalf("JoulesPerToken(%d, %d) = %v, %v; want %v, %v", tt.mj, tt.tk, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestWindow(t *testing.T) {
	r := mustNew(t, 16)
	// 100 ms samples; 50 mJ and 2 tokens per sample.
	const ms = int64(1e6)
	for i := int64(0); i <= 10; i++ {
		if err := r.Push(ring.Point{T: i * 100 * ms, EnergyMJ: uint64(i) * 50, Tokens: uint64(i) * 2}); err != nil {
			t.Fatal(err)
		}
	}
	// [150, 720] ms uses the points at 100 and 700: 300 mJ, 12 tokens.
	w, ok := r.Window(150*ms, 720*ms)
	if !ok || w.EnergyMJ() != 300 || w.Tokens() != 12 || w.Samples != 6 {
		t.Fatalf("Window = %+v (E=%d K=%d), %v", w, w.EnergyMJ(), w.Tokens(), ok)
	}
	if watts, ok := w.Watts(); !ok || math.Abs(watts-0.5) > 1e-12 {
		t.Fatalf("Watts = %v, %v; want 0.5", watts, ok)
	}
	// Inside one sample interval no tokens were counted: no J/token.
	if w, ok := r.Window(110*ms, 190*ms); !ok || w.Tokens() != 0 {
		t.Fatalf("Window inside one interval = %+v, %v; want no tokens", w, ok)
	} else if _, ok := w.JoulesPerToken(); ok {
		t.Fatal("JoulesPerToken over a window with no tokens returned a value")
	}
	if _, ok := r.Window(500*ms, 400*ms); ok {
		t.Fatal("Window with end before start returned a value")
	}
	empty := mustNew(t, 2)
	if _, ok := empty.Window(0, 10); ok {
		t.Fatal("Window on an empty ring returned a value")
	}
}

// TestRingConcurrentSafe runs one writer pushing continuously while readers
// check that every point they see is whole (energy and tokens are functions
// of time) and that what they observe never moves backwards.
func TestRingConcurrentSafe(t *testing.T) {
	const pushes = 200_000
	r := mustNew(t, 64) // small, so the writer laps readers often
	energy := func(t int64) uint64 { return uint64(t)*7 + 3 }
	tokens := func(t int64) uint64 { return uint64(t) / 2 }
	check := func(p ring.Point) error {
		if p.EnergyMJ != energy(p.T) || p.Tokens != tokens(p.T) {
			return fmt.Errorf("torn point %+v", p)
		}
		return nil
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var newest int64 = -1
			for i := int64(0); ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if p, ok := r.Back(0); ok {
					if err := check(p); err != nil {
						errs <- err
						return
					}
					if p.T < newest {
						errs <- fmt.Errorf("newest went backwards: %d after %d", p.T, newest)
						return
					}
					newest = p.T
				}
				// Every integer time is pushed, so for q within the ring the
				// answer is exactly q. A later answer must come from the
				// oldest end: the oldest point, or, while the writer laps
				// this reader, a point within the guard band of at most half
				// the ring that retries step over.
				q := newest - i%100
				if p, ok := r.AtOrBefore(q); ok {
					if err := check(p); err != nil {
						errs <- err
						return
					}
					after, _ := r.Back(0)
					switch {
					case p.T < q:
						errs <- fmt.Errorf("AtOrBefore(%d) = %+v skipped a closer point", q, p)
						return
					case p.T > q && p.T > max(0, after.T-int64(r.Cap())+2)+int64(r.Cap())/2:
						errs <- fmt.Errorf("AtOrBefore(%d) = %+v, far from the oldest end", q, p)
						return
					}
				}
			}
		}()
	}
	for i := int64(0); i < pushes; i++ {
		if err := r.Push(ring.Point{T: i, EnergyMJ: energy(i), Tokens: tokens(i)}); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// refRing is the reference model for FuzzRing: a mutex and a slice.
type refRing struct {
	mu  sync.Mutex
	cap int
	pts []ring.Point
}

func (f *refRing) push(p ring.Point) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pts = append(f.pts, p)
	if len(f.pts) > f.cap-1 {
		f.pts = f.pts[1:]
	}
}

func (f *refRing) atOrBefore(t int64) (ring.Point, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pts) == 0 {
		return ring.Point{}, false
	}
	best := f.pts[0]
	for _, p := range f.pts {
		if p.T <= t {
			best = p
		}
	}
	return best, true
}

func (f *refRing) back(k int) (ring.Point, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k < 0 || k >= len(f.pts) {
		return ring.Point{}, false
	}
	return f.pts[len(f.pts)-1-k], true
}

func FuzzRing(f *testing.F) {
	f.Add(uint8(2), []byte{1, 2, 3, 4, 5, 6})
	f.Add(uint8(7), []byte{0, 0, 9, 1, 200, 3, 3, 3, 250, 4, 17})
	f.Fuzz(func(t *testing.T, capSel uint8, ops []byte) {
		n := 2 + int(capSel%15)
		r := mustNew(t, n)
		ref := &refRing{cap: r.Cap()}
		var now int64
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], int64(ops[i+1])
			switch op % 4 {
			case 0, 1: // push; times may repeat
				now += arg % 8
				p := ring.Point{T: now, EnergyMJ: uint64(now) * 3, Tokens: uint64(i)}
				if err := r.Push(p); err != nil {
					t.Fatal(err)
				}
				ref.push(p)
			case 2:
				q := now - arg
				got, ok := r.AtOrBefore(q)
				want, wok := ref.atOrBefore(q)
				if got != want || ok != wok {
					t.Fatalf("AtOrBefore(%d) = %+v %v, reference %+v %v", q, got, ok, want, wok)
				}
			case 3:
				k := int(arg%20) - 2
				got, ok := r.Back(k)
				want, wok := ref.back(k)
				if got != want || ok != wok {
					t.Fatalf("Back(%d) = %+v %v, reference %+v %v", k, got, ok, want, wok)
				}
			}
			if r.Len() != len(ref.pts) {
				t.Fatalf("Len = %d, reference %d", r.Len(), len(ref.pts))
			}
		}
	})
}

func ExampleRing_AtOrBefore() {
	r, _ := ring.New(8)
	for i := int64(0); i < 4; i++ {
		r.Push(ring.Point{T: i * 100, EnergyMJ: uint64(i) * 250, Tokens: uint64(i) * 5})
	}
	p, _ := r.AtOrBefore(250)
	fmt.Println(p.T, p.EnergyMJ, p.Tokens)
	// Output: 200 500 10
}

func ExampleRing_Window() {
	r, _ := ring.New(ring.DefaultCapacity)
	// Samples every 100 ms: 40 mJ and 4 tokens between each.
	for i := int64(0); i <= 10; i++ {
		r.Push(ring.Point{T: i * 100e6, EnergyMJ: uint64(i) * 40, Tokens: uint64(i) * 4})
	}
	// Between 300 ms and 800 ms: 200 mJ for 20 tokens.
	w, _ := r.Window(300e6, 800e6)
	jpt, _ := w.JoulesPerToken()
	fmt.Println(w.EnergyMJ(), w.Tokens(), jpt)
	// Output: 200 20 0.01
}
