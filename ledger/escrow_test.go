package ledger

import (
	"runtime"
	"testing"
	"unsafe"
)

// TestEscrowLateReporter: a request that reports nothing until it ends,
// long after the horizon, gets its share of every interval it was active
// in, not only of those after the horizon. Two requests produce a token
// every 10 ms for 30 s on a board that draws 1 J per token; one streams,
// the other reports its 3,000 tokens at its end; the horizon is 2 s. Each
// earned half.
func TestEscrowLateReporter(t *testing.T) {
	const ms = int64(1e6)
	g := newRig(t, Config{Horizon: 2000 * ms, IdleFixed: true})
	g.step(0, 0, nil)
	a, b := newAccount(0, nil), newAccount(0, nil)
	g.l.Add(a)
	g.l.Add(b)
	for t0 := 10 * ms; t0 <= 30_000*ms; t0 += 10 * ms {
		a.AddOutput(1)
		if t0 == 30_000*ms {
			b.AddOutput(3000)
			a.End(t0)
			b.End(t0)
		}
		g.step(t0, 2000, nil)
	}
	g.step(40_000*ms, 0, nil)
	if !a.Final() || !b.Final() {
		t.Fatalf("final: a %v, b %v", a.Final(), b.Final())
	}
	ea, eb := float64(a.EnergyMJ()), float64(b.EnergyMJ())
	if d := (eb - ea) / ea; d < -0.05 || d > 0.05 {
		t.Errorf("late reporter got %.0f mJ, the streaming one %.0f (%+.1f%%); want within 5%%", eb, ea, d*100)
	}
	if b.Flags()&FlagForced == 0 {
		t.Error("the late reporter's figure is not marked forced")
	}
	if got := a.EnergyMJ() + b.EnergyMJ() + g.l.Unattributed(); got != g.l.SplitMJ() {
		t.Errorf("conservation: %d != %d", got, g.l.SplitMJ())
	}
}

// TestEscrowSilentBounded: 10,000 requests that report nothing for a
// minute hold no interval back past the horizon and no memory that grows
// with time; when they end, every one is final with a share of the energy,
// and the energy is conserved exactly.
func TestEscrowSilentBounded(t *testing.T) {
	const (
		ms = int64(1e6)
		n  = 10_000
	)
	horizon := 1000 * ms
	g := newRig(t, Config{Horizon: horizon})
	g.step(0, 0, nil)
	// A streaming request first, so that the batch's rate and prefill
	// time are known.
	w := newAccount(0, nil)
	g.l.Add(w)
	reqs := make([]*Account, n)
	for i := range reqs {
		reqs[i] = newAccount(100*ms, nil)
	}
	var heap [2]uint64
	final := 0
	for t0 := 100 * ms; t0 <= 60_000*ms; t0 += 100 * ms {
		w.AddOutput(3)
		if t0 == 100*ms {
			for _, r := range reqs {
				r.AddInput(500)
				g.l.Add(r)
			}
		}
		g.step(t0, 50_000, func(*Account) { final++ })
		splitT, _ := g.l.devs[0].ivs.split.Last()
		if lag := t0 - splitT; t0 > 2*horizon && lag > horizon+100*ms {
			t.Fatalf("at %d ms the split is %d ms behind: silent requests hold it back", t0/ms, lag/ms)
		}
		for k, at := range []int64{20_000 * ms, 60_000 * ms} {
			if t0 == at {
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				heap[k] = m.HeapAlloc
			}
		}
	}
	if got := g.l.Active(); got != n+1 {
		t.Fatalf("Active = %d, want %d", got, n+1)
	}
	// 40 s more of silence grows nothing per request: allow 64 bytes each.
	t.Logf("heap %d bytes at 20 s, %d at 60 s, with %d silent requests of %d bytes each",
		heap[0], heap[1], n, unsafe.Sizeof(Account{}))
	if heap[1] > heap[0]+64*n {
		t.Errorf("heap grew from %d to %d bytes over 40 s of silence", heap[0], heap[1])
	}
	for _, r := range reqs {
		r.AddOutput(1000)
		r.End(60_050 * ms)
	}
	w.End(60_050 * ms)
	g.step(60_100*ms, 5000, func(*Account) { final++ })
	g.step(70_000*ms, 0, func(*Account) { final++ })
	if final != n+1 {
		t.Fatalf("%d requests final, want %d", final, n+1)
	}
	sum := w.EnergyMJ() + g.l.Unattributed()
	for _, r := range reqs {
		if r.EnergyMJ() == 0 {
			t.Fatal("a silent request got nothing")
		}
		sum += r.EnergyMJ()
	}
	if sum != g.l.SplitMJ() {
		t.Errorf("conservation: %d != %d", sum, g.l.SplitMJ())
	}
}

// TestRunningPrefillInput: a prefill still running when intervals are
// split at the horizon spreads its prompt's tokens over its expected
// length, not over the time it has run so far in each interval split:
// that would give each interval the whole prompt's weight again. A
// request prefills an 8,000-token prompt for 4 s (at 1 mJ per input token,
// spread evenly) beside one that streams a token every 10 ms (1 J each);
// the horizon is 1 s. Five earlier requests with the same prompt teach the
// prefill's length, and the model the energy of a token of each kind.
func TestRunningPrefillInput(t *testing.T) {
	const (
		ms     = int64(1e6)
		prompt = 8000
		pfLen  = 4000 * ms
	)
	g := newRig(t, Config{Horizon: 1000 * ms, IdleFixed: true})
	g.step(0, 0, nil)
	type job struct {
		r        *Account
		start    int64
		decoding bool
		left     int // tokens left to produce once decoding
	}
	var jobs []*job
	add := func(t0 int64, in uint64, tokens int, fromStart bool) *job {
		j := &job{r: newAccount(t0, nil), start: t0, decoding: fromStart, left: tokens}
		j.r.AddInput(in)
		g.l.Add(j.r)
		jobs = append(jobs, j)
		return j
	}
	var a, b *job
	for t0 := 10 * ms; t0 <= 60_000*ms; t0 += 10 * ms {
		switch {
		case t0 < 30_000*ms && (t0-10*ms)%(6000*ms) == 0:
			add(t0, prompt, 20, false)
		case t0 == 31_000*ms:
			a = add(t0, prompt, 20, false)
			b = add(t0, 0, 700, true)
		}
		var mj uint64
		for _, j := range jobs {
			if _, ended := j.r.Ended(); ended {
				continue
			}
			if !j.decoding && t0-j.start >= pfLen {
				j.decoding = true
			}
			if !j.decoding {
				mj += prompt * uint64(10*ms) / uint64(pfLen) // 1 mJ per input token over the prefill
				continue
			}
			j.r.AddOutput(1)
			mj += 1000
			if j.left--; j.left == 0 {
				j.r.End(t0)
			}
		}
		g.step(t0, mj, nil)
	}
	if !a.r.Final() || !b.r.Final() {
		t.Fatalf("final: a %v, b %v", a.r.Final(), b.r.Final())
	}
	wantA, wantB := float64(prompt+20*1000), float64(700*1000)
	if ea := float64(a.r.EnergyMJ()); ea < 0.85*wantA || ea > 1.15*wantA {
		t.Errorf("the long prefill got %.0f mJ, want %.0f within 15%% (the streaming one got %d, want %.0f)", ea, wantA, b.r.EnergyMJ(), wantB)
	}
}
