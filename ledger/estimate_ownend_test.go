package ledger

import (
	"math"
	"testing"
)

// TestEstimateOwnEndCountedOnce checks that a request's own end is not
// taken for the end of another: on a board that draws only its static
// power, a request that starts after the provisional split's point and
// ends before the next counter step shares that power with the requests
// running beside it, and its estimate at End is its equal share of the
// board over its run. Counting its own end among the ends since that
// point, as well as among the running, priced it as one among one more
// request than there were (a third instead of a half with one neighbour,
// a half instead of the whole board alone).
func TestEstimateOwnEndCountedOnce(t *testing.T) {
	const staticW = 100
	for _, c := range []struct {
		name       string
		neighbours int
		settle     bool // a settle comes between End and the estimate
	}{
		{"alone", 0, false},
		{"one-neighbour", 1, false},
		{"three-neighbours", 3, false},
		{"one-neighbour-settled", 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, Config{Horizon: 1e12})
			g.step(0, 0, nil)
			for range c.neighbours {
				g.l.Add(newAccount(1, nil))
			}
			g.step(1e8, staticW*100, nil)
			g.step(2e8, staticW*100, nil)
			r := newAccount(2.1e8, nil)
			g.l.Add(r)
			g.l.Observe(2.2e8, 0, 0)
			g.l.Settle(2.2e8, nil)
			g.l.End(r, 3e8)
			if c.settle {
				g.l.Observe(2.9e8+5e6, 0, 0)
				g.l.Settle(2.9e8+5e6, nil)
			}
			// Nothing but static power: every request active at an
			// instant draws the same. (Stored after the last settle,
			// which publishes the model's own.)
			setPrices(g.l, prices{staticW: staticW})
			got := float64(g.l.Estimate(r, 3e8))
			// 90 ms among 1+neighbours requests, in mJ.
			want := staticW * 90.0 / float64(1+c.neighbours)
			if math.Abs(got-want) > 0.02*want {
				t.Fatalf("estimate %.0f mJ, want %.0f mJ (a 1/%d share of %d W for 90 ms)", got, want, 1+c.neighbours, staticW)
			}
		})
	}
}
