package ledger

import (
	"math"
	"testing"
)

// TestRunningNowAfterObserveWithoutSettle checks that requests adopted by a
// read that settles nothing (no counter step) still count as running, and
// that their ends take them out one by one rather than below zero.
func TestRunningNowAfterObserveWithoutSettle(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e9})
	g.step(0, 0, nil)
	rs := make([]*Account, 10)
	for i := range rs {
		rs[i] = newAccount(10, nil)
		g.l.Add(rs[i])
	}
	g.l.Observe(50, 0, 0)
	if n, _, _ := g.l.running3(); n != 10 {
		t.Fatalf("runningNow after an Observe without Settle = %d, want 10", n)
	}
	for _, r := range rs[:6] {
		g.l.End(r, 60)
	}
	if n, k, _ := g.l.running3(); n != 4 || k != 6 {
		t.Fatalf("after 6 ends: runningNow = %d with %d ends, want 4 and 6", n, k)
	}
	g.l.Observe(70, 0, 0)
	if n, _, _ := g.l.running3(); n != 4 {
		t.Fatalf("after the next Observe: runningNow = %d, want 4", n)
	}
	g.l.Settle(80, nil)
	if n, k, _ := g.l.running3(); n != 4 || k != 0 {
		t.Fatalf("after a settle: runningNow = %d with %d ends since it, want 4 and 0", n, k)
	}
}

// TestEstimateBurstAfterProvisionalPoint checks that requests starting
// after the provisional split's point share the static power among
// themselves: ten requests that start together after it and end 90 ms
// later are estimated no more than the board's power over that time, not
// each the whole static power.
func TestEstimateBurstAfterProvisionalPoint(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	g.l.Add(newAccount(1, nil))
	g.step(1e8, 10000, nil)
	g.step(2e8, 10000, nil)
	rs := make([]*Account, 10)
	for i := range rs {
		rs[i] = newAccount(2.1e8, nil)
		g.l.Add(rs[i])
	}
	g.l.Observe(2.2e8, 0, 0)
	g.l.Settle(2.2e8, nil)
	const staticW, allW = 100, 110
	setPrices(g.l, prices{staticW: staticW, pfLoneW: allW - staticW})
	for _, r := range rs {
		g.l.End(r, 3e8)
	}
	var sum uint64
	for _, r := range rs {
		sum += g.l.Estimate(r, 3e8)
	}
	// The eleven requests share the board over the 90 ms; the ten get at
	// most all of its energy in that time.
	if limit := uint64(allW * 90); sum > limit {
		t.Fatalf("ten estimates sum to %d mJ, above the board's %d mJ over their 90 ms", sum, limit)
	}
	if sum == 0 {
		t.Fatal("ten estimates sum to 0 mJ")
	}
}

// TestEstimateShortRequestSharesDecodePower: a request whose whole life
// falls between two counter steps, on a board whose decode power is a
// plateau (a busy power while any request decodes), is estimated at its
// share by time of the static and the busy power: 80 ms beside one other
// request on a 120 W + 280 W board is about (120 + 280) W / 2 × 80 ms,
// less its prefill's few ms. Its tokens are priced by that share, not
// once more at the energy per token.
func TestEstimateShortRequestSharesDecodePower(t *testing.T) {
	g := newRig(t, Config{Horizon: 1e12})
	g.step(0, 0, nil)
	g.l.Add(newAccount(1, nil)) // decoding throughout
	g.step(1e8, 40000, nil)
	g.step(2e8, 40000, nil)
	r := newAccount(2.1e8, nil)
	g.l.Add(r)
	g.l.Observe(2.2e8, 0, 0)
	g.l.Settle(2.2e8, nil)
	const staticW, busyW = 120, 280
	setPrices(g.l, prices{staticW: staticW, decBusyW: busyW, tokJ: 1})
	r.AddInput(100)
	r.AddOutput(10)
	g.l.End(r, 2.9e8)
	got := float64(g.l.Estimate(r, 2.9e8))
	// Half the board for 80 ms, its decode share for all but its prefill
	// (one token's even share of its life, 7 ms, before any is learned).
	want := (staticW*80 + busyW*(80-80.0/11)) / 2.0
	if got < 0.9*want || got > 1.1*want {
		t.Fatalf("estimate %.0f mJ, want about %.0f (static and busy power shared by two for 80 ms)", got, want)
	}
}

// TestEstimateBeforeTheModelPricesCurrentPower: while the device's model
// is not usable and no split has priced a token (a Monitor's first
// seconds under clients that report only at their end), a request's time
// since the newest counter step is priced at the device's newest measured
// power times its share, not at the static power alone, which would price
// a busy board as idle.
func TestEstimateBeforeTheModelPricesCurrentPower(t *testing.T) {
	g := newRig(t, Config{Horizon: 10e9})
	g.idle(100e6, 1000e6, 10_000) // 100 W idle: the static power is measured
	r := newAccount(1000e6+1, nil)
	g.l.Add(r)
	g.step(1100e6, 50_000, nil) // 500 W while it runs
	if g.l.model.devs[0].usable {
		t.Fatal("the model is usable after one busy interval")
	}
	r.AddOutput(5) // reported only at its end
	g.l.End(r, 1150e6)
	// (1000, 1100] is 50 J, all its own; (1100, 1150] at 500 W is 25 J.
	got, want := float64(g.l.Estimate(r, 1150e6)), 75_000.0
	if math.Abs(got-want) > 0.1*want {
		t.Errorf("End's estimate %.0f mJ, want about %.0f: the unmetered 50 ms at the board's newest 500 W", got, want)
	}
}
