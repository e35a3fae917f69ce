package ledger

import (
	"testing"
)

// splitCall is one Config.OnSplit call, copied out of the ledger's
// scratch.
type splitCall struct {
	dev    int
	a, b   int64
	shares map[*Account]uint64
	cover  map[*Account]uint64
	rest   uint64
}

// recordSplits returns an OnSplit hook that appends each call to *calls.
func recordSplits(calls *[]splitCall) func(int, int64, int64, []*Account, []uint64, uint64, []uint64) {
	return func(dev int, a, b int64, reqs []*Account, sharesMJ []uint64, restMJ uint64, coverNS []uint64) {
		if len(sharesMJ) != len(reqs) || len(coverNS) != len(reqs) {
			panic("OnSplit: slices of different lengths")
		}
		c := splitCall{dev: dev, a: a, b: b, rest: restMJ, shares: map[*Account]uint64{}, cover: map[*Account]uint64{}}
		for i, r := range reqs {
			c.shares[r] += sharesMJ[i]
			c.cover[r] += coverNS[i]
		}
		*calls = append(*calls, c)
	}
}

// TestOnSplitFinalSplitsOnly runs TestSplitByTime's requests, with the
// second starting halfway through an interval, and checks what OnSplit
// is handed against what the split must be: one call per interval of the
// ring, in order, none while the intervals only wait (though the
// provisional split has given the estimates their shares), each call's
// energy adding up to the interval's, each request's shares adding up to
// its final figure, and its time share computed by hand (an instant
// shared by two requests counts half to each).
func TestOnSplitFinalSplitsOnly(t *testing.T) {
	var calls []splitCall
	g := newRig(t, Config{Horizon: 1e9, OnSplit: recordSplits(&calls)})
	g.step(0, 0, nil)
	a := newAccount(0, nil)
	g.l.Add(a)
	g.step(100, 1000, nil) // a alone for 100 ns
	b := newAccount(150, nil)
	g.l.Add(b)
	g.step(200, 1000, nil) // a alone for 50 ns, then both for 50
	a.End(200)
	g.step(300, 1000, nil) // b alone
	b.End(300)
	g.step(400, 1000, nil) // nobody
	if g.l.SplitMJ() != 0 {
		t.Fatalf("the young model split %d mJ before the horizon; the test needs the intervals to wait", g.l.SplitMJ())
	}
	if est := g.l.Estimate(b, 300); est == 0 {
		t.Fatal("no provisional share for b: the test needs the provisional split to have run")
	}
	if len(calls) != 0 {
		t.Fatalf("OnSplit called %d times before any final split: %+v", len(calls), calls)
	}
	g.step(2e9, 0, nil) // past the horizon: everything is split
	if !a.Final() || !b.Final() {
		t.Fatalf("final: a %v b %v", a.Final(), b.Final())
	}

	want := []struct {
		a, b     int64
		mj       uint64
		coverA   uint64
		coverB   uint64
		anyShare bool
	}{
		{0, 100, 1000, 100, 0, true},
		{100, 200, 1000, 75, 25, true},
		{200, 300, 1000, 0, 100, true},
		{300, 400, 1000, 0, 0, false},
		// (400, 2e9] ends now: it waits for the horizon.
	}
	if len(calls) != len(want) {
		t.Fatalf("%d OnSplit calls, want one per interval, %d: %+v", len(calls), len(want), calls)
	}
	var sumA, sumB, sumAll uint64
	for i, w := range want {
		c := calls[i]
		if c.dev != 0 || c.a != w.a || c.b != w.b {
			t.Errorf("call %d: device %d (%d, %d], want device 0 (%d, %d]", i, c.dev, c.a, c.b, w.a, w.b)
		}
		var given uint64
		for _, s := range c.shares {
			given += s
		}
		if given+c.rest != w.mj {
			t.Errorf("call %d: shares %d + rest %d mJ = %d, want the interval's %d", i, given, c.rest, given+c.rest, w.mj)
		}
		if c.cover[a] != w.coverA || c.cover[b] != w.coverB {
			t.Errorf("call %d: cover a %d ns, b %d ns; want %d, %d", i, c.cover[a], c.cover[b], w.coverA, w.coverB)
		}
		if !w.anyShare && given != 0 {
			t.Errorf("call %d: %d mJ given in an interval with no request", i, given)
		}
		sumA += c.shares[a]
		sumB += c.shares[b]
		sumAll += given + c.rest
	}
	if sumA != a.EnergyMJ() || sumB != b.EnergyMJ() {
		t.Errorf("shares handed over: a %d, b %d mJ; their figures: %d, %d", sumA, sumB, a.EnergyMJ(), b.EnergyMJ())
	}
	if sumAll != g.l.SplitMJ() {
		t.Errorf("OnSplit was handed %d mJ, SplitMJ is %d", sumAll, g.l.SplitMJ())
	}
	// Before the model is learned the split is by time: 1000·75/100 to a.
	if got := calls[1].shares[a]; got != 750 {
		t.Errorf("a's share of (100, 200] = %d mJ, want 750", got)
	}
}

// TestOnSplitRestHoldsOtherProcesses: on a device shared with other
// processes, the rest OnSplit is handed is the unattributed energy plus
// the other processes' share, so that shares and rest still make the
// interval's energy.
func TestOnSplitRestHoldsOtherProcesses(t *testing.T) {
	var calls []splitCall
	g := newRig(t, Config{Horizon: 1e9, OnSplit: recordSplits(&calls)})
	g.l.SetShare(0, 0.25, true, false)
	g.step(0, 0, nil)
	r := newAccount(0, nil)
	g.l.Add(r)
	g.step(100, 4000, nil)
	r.End(100)
	g.step(2e9, 0, nil)
	if !r.Final() || len(calls) != 1 {
		t.Fatalf("final %v, %d calls; want final and 1", r.Final(), len(calls))
	}
	c := calls[0]
	if c.shares[r] != 1000 || c.rest != 3000 {
		t.Errorf("(0, 100]: share %d, rest %d mJ; want 1000 (a quarter) and 3000 (the other processes')", c.shares[r], c.rest)
	}
	if r.EnergyMJ()+g.l.Unattributed()+g.l.OtherProcesses() != g.l.SplitMJ() {
		t.Error("conservation broken")
	}
}

// TestOnSplitNoAllocs: handing an interval over allocates nothing once
// the scratch has grown to the number of requests.
func TestOnSplitNoAllocs(t *testing.T) {
	var n int
	g := newRig(t, Config{Horizon: 1, OnSplit: func(_ int, _, _ int64, reqs []*Account, _ []uint64, _ uint64, _ []uint64) {
		n += len(reqs)
	}})
	g.step(0, 0, nil)
	for i := range 8 {
		g.l.Add(newAccount(int64(i), nil))
	}
	tt := int64(100)
	g.step(tt, 1000, nil)
	d := &g.l.devs[0]
	allocs := testing.AllocsPerRun(100, func() {
		g.l.split(d, interval{T0: tt, T1: tt + 100, EnergyMJ: 1000}, tt+100, true)
		tt += 100
	})
	if allocs != 0 {
		t.Errorf("split with OnSplit: %v allocs per interval, want 0", allocs)
	}
	if n == 0 {
		t.Error("OnSplit never saw a request")
	}
}
