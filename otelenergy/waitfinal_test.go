package otelenergy

import (
	"context"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/simgpu"
)

// TestWaitFinal: WaitFinal returns the final figure once the ledger has
// split the request's end, the same the span exporter would carry, and
// before that, when its context ends, End's estimate marked approximate.
func TestWaitFinal(t *testing.T) {
	r := newRig(t, ideal(simgpu.Config{}), WithHorizon(time.Second))
	r.m.Sample()
	req := r.m.StartRequest(context.Background())
	r.tick(step)
	r.m.AddTokens(req, 40)
	r.tick(step)
	end := req.End()
	if !end.Approximate || req.st.Final() {
		t.Fatalf("End: %+v final %v; want an approximate estimate before the split", end, req.st.Final())
	}

	// A context that has ended: the estimate, at once.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if got := req.WaitFinal(done); got.EnergyMJ != end.EnergyMJ || !got.Approximate || !got.HasEnergy {
		t.Errorf("WaitFinal on an ended context: %+v, want End's estimate %+v", got, end)
	}

	// A live context: the final figure once the sampler settles it.
	res := make(chan Result, 1)
	go func() { res <- req.WaitFinal(context.Background()) }()
	var got Result
	for i := 0; ; i++ {
		select {
		case got = <-res:
		case <-time.After(time.Millisecond):
			if i > 10_000 {
				t.Fatal("WaitFinal did not return")
			}
			r.tick(step)
			continue
		}
		break
	}
	if !req.st.Final() {
		t.Fatal("WaitFinal returned before the figure was final")
	}
	if want := req.st.EnergyMJ(); got.EnergyMJ != want || !got.HasEnergy {
		t.Errorf("WaitFinal: %d mJ (has %v), want the final %d", got.EnergyMJ, got.HasEnergy, want)
	}
	if got.OutputTokens != 40 {
		t.Errorf("WaitFinal: %d output tokens, want 40", got.OutputTokens)
	}
}

// TestWaitFinalStalled: with no sampler running, WaitFinal does not wait
// for a figure that will not come.
func TestWaitFinalStalled(t *testing.T) {
	r := newRig(t, ideal(simgpu.Config{}))
	r.m.Sample()
	req := r.m.StartRequest(context.Background())
	r.tick(step)
	r.m.AddTokens(req, 3)
	req.End()
	r.clock.Advance(time.Minute) // the sampler last ran a minute ago
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	got := req.WaitFinal(ctx)
	if time.Since(began) > 5*time.Second || !got.Approximate {
		t.Errorf("WaitFinal on a stalled sampler took %v and returned %+v; want the estimate at once", time.Since(began), got)
	}
}
