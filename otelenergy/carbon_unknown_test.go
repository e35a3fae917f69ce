package otelenergy

import (
	"context"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/simgpu"
)

// TestCarbonUnknownNeedsEnergy: an interval converted at a reading not
// known for its time (it ended before the model's first noted reading)
// makes approximate only the requests it gave energy. A request active in
// it whose share was 0 mJ got no emissions from it, so its figure stays
// exact (Request.End's Approximate reads these flags).
func TestCarbonUnknownNeedsEnergy(t *testing.T) {
	sr := &switchReader{}
	sr.set(436_000)
	model := newCarbonModel(t, sr)
	r := newRig(t, ideal(simgpu.Config{}), WithCarbon(model))
	given := r.m.StartRequest(context.Background())
	zero := r.m.StartRequest(context.Background())
	// The first reading is noted an hour in: an interval ending at 1 s is
	// converted at it, not known exactly for its time.
	model.Note(int64(time.Hour))
	if res := model.Interval(0, int64(time.Second), nil, 0, nil, nil, nil); res.Known || res.Reading == nil {
		t.Fatalf("the interval's reading: known %v, %v; want the oldest, not known", res.Known, res.Reading)
	}
	reqs := []*ledger.Account{&given.st.Account, &zero.st.Account}
	r.m.convertSplit(0, 0, int64(time.Second), reqs, []uint64{500, 0}, 10, []uint64{5e8, 5e8})
	if f := given.st.co2Flags.Load(); f&co2Unknown == 0 || f&co2Met == 0 {
		t.Errorf("a request given 500 mJ at a reading not known for its time: flags %b, want met and unknown", f)
	}
	if f := zero.st.co2Flags.Load(); f&co2Unknown != 0 {
		t.Errorf("a request given 0 mJ: flags %b, want not unknown: it got no emissions from the interval", f)
	}
}
