package otelenergy

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/simgpu"
)

// tokenWant counts what a test reported, the ground truth the Monitor's
// derived totals are checked against.
type tokenWant struct{ out, in atomic.Uint64 }

func (w *tokenWant) add(m *Monitor, ctx context.Context, out, in int) {
	m.AddTokens(ctx, out)
	m.AddInputTokens(ctx, in)
	w.out.Add(uint64(out))
	w.in.Add(uint64(in))
}

// checkTokens fails unless the totals, the exported counter and device
// 0's newest ring point all show exactly what was reported.
func (r *testRig) checkTokens(t *testing.T, w *tokenWant, what string, exported func() (int64, int64)) {
	t.Helper()
	tot := r.m.Totals()
	if tot.OutputTokens != w.out.Load() || tot.InputTokens != w.in.Load() {
		t.Fatalf("%s: Totals tokens = %d out, %d in; reported %d, %d", what, tot.OutputTokens, tot.InputTokens, w.out.Load(), w.in.Load())
	}
	if exported != nil {
		if out, in := exported(); uint64(out) != w.out.Load() || uint64(in) != w.in.Load() {
			t.Fatalf("%s: otelenergy.tokens = %d output, %d input; reported %d, %d", what, out, in, w.out.Load(), w.in.Load())
		}
	}
}

// TestTokenTotalsExact checks that after a sample the Monitor's token
// totals are exactly what was reported: outside any request, by a request
// started before the first sample, by requests that run, end and are
// finalized, by a request that reports after its End and after it was
// finalized, by requests the ledger refused at its limit, and around
// Shutdown. The ring's newest point carries the same output total.
func TestTokenTotalsExact(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 65,539 requests")
	}
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp))
	exported := func() (int64, int64) {
		p := intPoints(t, collect(t, rd), "otelenergy.tokens", tokenTypeKey)
		return p["output"], p["input"]
	}
	var w tokenWant
	bg := context.Background()

	// Before the first sample: outside any request, and in a request the
	// ledger does not track.
	w.add(r.m, bg, 7, 3)
	early := r.m.StartRequest(bg)
	w.add(r.m, early, 11, 5)
	r.m.Sample()
	r.checkTokens(t, &w, "first sample", exported)
	if p, ok := r.m.devs[0].ring.Back(0); !ok || p.Tokens != w.out.Load() {
		t.Fatalf("newest ring point has %d tokens (ok=%v), totals %d", p.Tokens, ok, w.out.Load())
	}

	// Tracked requests: one ends before the sampler adopts it, one runs
	// across samples and ends, one keeps running.
	quick := r.m.StartRequest(bg)
	w.add(r.m, quick, 4, 2)
	quick.End()
	long := r.m.StartRequest(bg)
	open := r.m.StartRequest(bg)
	for range 5 {
		w.add(r.m, long, 3, 0)
		w.add(r.m, open, 2, 1)
		r.tick(step)
		r.checkTokens(t, &w, "running", exported)
		p, _ := r.m.devs[0].ring.Back(0)
		if p.Tokens != w.out.Load() {
			t.Fatalf("newest ring point has %d tokens, totals %d", p.Tokens, w.out.Load())
		}
	}
	w.add(r.m, long, 1, 0)
	long.End()
	open.End()
	// A report after End, before and after the ledger finalizes the
	// request: neither is lost.
	w.add(r.m, long, 2, 1)
	r.tick(step)
	r.checkTokens(t, &w, "after End", exported)
	r.settle(t)
	if r.m.ledger.Active() != 0 {
		t.Fatal("requests still tracked")
	}
	w.add(r.m, long, 6, 2) // finalized: a late report
	r.tick(step)
	r.checkTokens(t, &w, "late report", exported)

	// Requests refused at the ledger's limit still count.
	held := make([]*Request, ledger.DefaultMaxActive)
	for i := range held {
		held[i] = r.m.StartRequest(bg)
	}
	const extra = 3
	refused := make([]*Request, extra)
	for i := range refused {
		refused[i] = r.m.StartRequest(bg)
		w.add(r.m, refused[i], 5+i, 1)
	}
	if got := r.m.Stats().DroppedRequests; got < extra {
		t.Fatalf("DroppedRequests = %d, want at least %d", got, extra)
	}
	r.tick(step)
	for _, q := range refused {
		w.add(r.m, q, 1, 0)
		if res := q.End(); res.HasEnergy || res.OutputTokens == 0 {
			t.Fatalf("refused request: HasEnergy=%v tokens=%d", res.HasEnergy, res.OutputTokens)
		}
	}
	w.add(r.m, held[0], 9, 9)
	r.tick(step)
	r.checkTokens(t, &w, "refused", exported)
	for _, q := range held {
		q.End()
	}

	// Shutdown flushes every request; the totals stay exact, and a
	// report after it still counts.
	w.add(r.m, held[1], 2, 0)
	w.add(r.m, bg, 1, 1)
	if err := r.m.Shutdown(bg); err != nil {
		t.Fatal(err)
	}
	r.checkTokens(t, &w, "after Shutdown", nil)
	w.add(r.m, held[2], 3, 0)
	w.add(r.m, bg, 1, 0)
	r.checkTokens(t, &w, "reported after Shutdown", nil)
}

// TestTokenCounterMonotonicConcurrentSafe reports tokens from many
// goroutines, in requests and outside any, while the Monitor samples and
// a reader collects: the exported counter, Totals and the ring's points
// never decrease, and once every report is in, the totals are exact.
func TestTokenCounterMonotonicConcurrentSafe(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp))
	r.m.Sample()
	var w tokenWant
	bg := context.Background()

	// Each worker's reports are paced by the sampler's ticks, two requests
	// a tick, so that collections and samples interleave with them.
	const workers, perWorker, minTicks = 8, 200, 100
	var ticks, checks atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				for ticks.Load() < int64(i/2) {
					runtime.Gosched()
				}
				if i%7 == 0 {
					w.add(r.m, bg, 1, 1)
				}
				q := r.m.StartRequest(bg)
				for k := range 1 + (i+g)%5 {
					w.add(r.m, q, k+1, k%2)
				}
				q.End()
				if i%11 == 0 {
					w.add(r.m, q, 1, 0) // after End
				}
			}
		}()
	}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			default:
				r.tick(step)
				ticks.Add(1)
			}
		}
	}()
	var prevOut, prevIn int64
	var prevTot Snapshot
	var prevRing uint64
	check := func() {
		checks.Add(1)
		p := intPoints(t, collect(t, rd), "otelenergy.tokens", tokenTypeKey)
		if p["output"] < prevOut || p["input"] < prevIn {
			t.Fatalf("otelenergy.tokens went from %d/%d to %d/%d", prevOut, prevIn, p["output"], p["input"])
		}
		prevOut, prevIn = p["output"], p["input"]
		tot := r.m.Totals()
		if tot.OutputTokens < prevTot.OutputTokens || tot.InputTokens < prevTot.InputTokens {
			t.Fatalf("Totals tokens went from %d/%d to %d/%d", prevTot.OutputTokens, prevTot.InputTokens, tot.OutputTokens, tot.InputTokens)
		}
		if tot.OutputTokens > w.out.Load() || tot.InputTokens > w.in.Load() {
			t.Fatalf("Totals tokens %d/%d above the %d/%d reported", tot.OutputTokens, tot.InputTokens, w.out.Load(), w.in.Load())
		}
		prevTot = tot
		if pt, ok := r.m.devs[0].ring.Back(0); ok {
			if pt.Tokens < prevRing {
				t.Fatalf("ring point tokens went from %d to %d", prevRing, pt.Tokens)
			}
			prevRing = pt.Tokens
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			check()
		}
	}
	close(stopSampling)
	<-sampled
	r.settle(t)
	r.checkTokens(t, &w, "all reported", func() (int64, int64) {
		p := intPoints(t, collect(t, rd), "otelenergy.tokens", tokenTypeKey)
		return p["output"], p["input"]
	})
	check()
	if checks.Load() < minTicks/10 {
		t.Fatalf("%d collections during %d samples: too few to interleave", checks.Load(), ticks.Load())
	}
	t.Logf("%d collections interleaved with %d samples; %d output tokens", checks.Load(), ticks.Load(), w.out.Load())
}

// TestFirstOutputStampedAtTheSource: a request's first output report is
// stamped with the Monitor's clock when AddTokens is called, so the
// ledger places its first token there, not at the read that saw it.
func TestFirstOutputStampedAtTheSource(t *testing.T) {
	r := newRig(t, ideal(simgpu.Config{}))
	r.tick(DefaultInterval)
	req := r.m.StartRequest(context.Background())
	r.m.AddInputTokens(req, 100)
	// The first token 3 ms after the start, then one every 2 ms, read
	// every DefaultInterval: the first read sees seven tokens at once.
	r.clock.Advance(3 * time.Millisecond)
	firstAt := r.m.now()
	for i := 0; i < 20; i++ {
		r.m.AddTokens(req, 1)
		r.clock.Advance(2 * time.Millisecond)
		if i == 6 || i == 13 || i == 19 {
			r.m.Sample()
		}
	}
	ft, ok := req.st.FirstToken()
	if !ok {
		t.Fatal("no first token placed")
	}
	if ft != firstAt {
		t.Errorf("first token at %v after the start, want %v: the stamp", time.Duration(ft-req.st.Start()), time.Duration(firstAt-req.st.Start()))
	}
	req.End()
}

// TestChunksStampedAtTheSource: Monitor.AddTokens stamps a report of more
// than one token with the Monitor's clock, so the sampler places it where
// it was made. A request reports in chunks of 16, the first 200 ms after
// its start and the second 73 ms later, with reads every DefaultInterval:
// the second chunk times the step (73/16 ms) and through it the prefill's
// end, and its stamp, not the read that saw it, must give both.
func TestChunksStampedAtTheSource(t *testing.T) {
	r := newRig(t, ideal(simgpu.Config{}))
	r.tick(DefaultInterval)
	req := r.m.StartRequest(context.Background())
	start := req.st.Start()
	var at [2]int64
	for ms := 1; ms <= 400; ms++ {
		r.clock.Advance(time.Millisecond)
		switch ms {
		case 200, 273:
			at[ms/250] = r.m.now()
			r.m.AddTokens(req, 16)
		}
		if ms%int(DefaultInterval/time.Millisecond) == 0 {
			r.m.Sample()
		}
	}
	ft, ok := req.st.FirstToken()
	if !ok {
		t.Fatal("no first token placed")
	}
	step := (at[1] - at[0]) / 16
	want := at[0] - 16*step + step
	if d := ft - want; d < -1000 || d > 1000 {
		t.Errorf("first token at %v after the start, want %v: 16 steps of %v before the first chunk's stamp, and one after", time.Duration(ft-start), time.Duration(want-start), time.Duration(step))
	}
	req.End()
}
