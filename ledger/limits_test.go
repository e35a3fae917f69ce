package ledger_test

import (
	"testing"

	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/ring"
)

func newRing(t testing.TB) *ring.Ring {
	t.Helper()
	r, err := ring.New(ring.DefaultCapacity)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestMaxActiveDrops adds more requests than the ledger tracks: the excess
// get no energy, are final at once and are counted.
func TestMaxActiveDrops(t *testing.T) {
	rg := newRing(t)
	l := ledger.New(ledger.Config{Rings: []*ring.Ring{rg}, MaxActive: 4})
	reqs := make([]*ledger.Account, 6)
	for i := range reqs {
		reqs[i] = account(0, nil)
		l.Add(reqs[i])
	}
	l.Observe(1, 0, 0)
	if got := l.Dropped(); got != 2 {
		t.Fatalf("Dropped = %d, want 2", got)
	}
	if got := l.Active(); got != 4 {
		t.Fatalf("Active = %d, want 4", got)
	}
	dropped := 0
	for _, r := range reqs {
		if r.Flags()&ledger.FlagDropped != 0 {
			dropped++
			if !r.Final() || r.EnergyMJ() != 0 {
				t.Errorf("dropped request: final=%v energy=%d; want final with none", r.Final(), r.EnergyMJ())
			}
		}
	}
	if dropped != 2 {
		t.Fatalf("%d requests flagged dropped, want 2", dropped)
	}
}

// TestMaxAgeExpires leaves a request open past the maximum age: it stops
// accruing then, is final once the intervals up to then are split, and is
// counted.
func TestMaxAgeExpires(t *testing.T) {
	const (
		ms     = int64(1e6)
		maxAge = 1000 * ms
		wattMJ = 1 // 1 W: 1 mJ per ms
	)
	rg := newRing(t)
	l := ledger.New(ledger.Config{Rings: []*ring.Ring{rg}, MaxAge: maxAge, Horizon: 500 * ms})
	r := account(0, nil)
	l.Add(r)
	var finals int
	for t0 := int64(0); t0 <= 3000*ms; t0 += 100 * ms {
		if err := rg.Push(ring.Point{T: t0, EnergyMJ: uint64(t0/ms) * wattMJ}); err != nil {
			t.Fatal(err)
		}
		l.Observe(t0, 0, 0)
		l.Settle(t0, func(*ledger.Account) { finals++ })
	}
	if got := l.Expired(); got != 1 {
		t.Fatalf("Expired = %d, want 1", got)
	}
	if !r.Final() || r.Flags()&ledger.FlagExpired == 0 || finals != 1 {
		t.Fatalf("final=%v flags=%b callbacks=%d; want final, expired, one callback", r.Final(), r.Flags(), finals)
	}
	// Alone, it can have earned at most the energy up to its maximum age.
	if got, limit := r.EnergyMJ(), uint64(maxAge/ms)*wattMJ; got == 0 || got > limit {
		t.Fatalf("expired request got %d mJ, want some and at most the %d mJ before its maximum age", got, limit)
	}
	if got, want := r.EnergyMJ()+l.Unattributed()+l.OtherProcesses(), l.SplitMJ(); got != want {
		t.Fatalf("request + unattributed = %d mJ, split %d mJ", got, want)
	}
}

// account returns a request that started at t, as a caller builds one.
func account(t int64, data any) *ledger.Account {
	r := new(ledger.Account)
	r.Init(t, data)
	return r
}
