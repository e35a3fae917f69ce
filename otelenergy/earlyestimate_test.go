package otelenergy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/simgpu"
)

// TestEndEstimateBeforeFirstSplit: a request that ends before the ledger
// has split anything, or learned its model, still gets an End() figure
// for the energy metered while it ran, never 0: whenever in the
// Monitor's first counter periods it starts, however long its prefill,
// whatever the board.
func TestEndEstimateBeforeFirstSplit(t *testing.T) {
	const tick = 20 * time.Millisecond
	for _, board := range []struct {
		name string
		cfg  simgpu.Config
	}{
		{"idealized", ideal(simgpu.Config{})},
		{"default", simgpu.Config{}},
		{"H100", simgpu.H100()},
	} {
		for _, startAfter := range []int{0, 1, 3, 6} { // ticks after the first sample
			for _, prefill := range []int{0, 2, 4} { // ticks before the first token
				t.Run(fmt.Sprintf("%s/start%d/prefill%d", board.name, startAfter, prefill), func(t *testing.T) {
					rig := newRig(t, board.cfg, WithInterval(tick))
					rig.tick(0)
					for range startAfter {
						rig.tick(tick)
					}
					req := rig.m.StartRequest(context.Background())
					rig.m.AddInputTokens(req, 20) // a Request is its own context
					for range prefill {
						rig.tick(tick)
					}
					for range 6 { // 12 tokens over 120 ms
						rig.tick(tick)
						rig.m.AddTokens(req, 2)
					}
					res := req.End()
					if !res.HasEnergy || res.EnergyMJ == 0 {
						t.Fatalf("End() = %d mJ (has %v): want the energy metered while it ran", res.EnergyMJ, res.HasEnergy)
					}
				})
			}
		}
	}
}

// TestEndEstimateBetweenSteps: a request whose whole life falls between
// two counter steps, before the model or the idle power is learned, is
// priced at the device's newest measured power times its share: its
// End() figure is that power over its life, not 0.
func TestEndEstimateBetweenSteps(t *testing.T) {
	rig := newRig(t, ideal(simgpu.Config{})) // steps every 100 ms from the GPU's creation
	rig.tick(0)
	for range 10 { // steps at 100 and 200 ms
		rig.tick(25 * time.Millisecond)
	}
	rig.tick(5 * time.Millisecond) // 255 ms
	req := rig.m.StartRequest(context.Background())
	for range 3 {
		rig.tick(10 * time.Millisecond)
		rig.m.AddTokens(req, 1) // a Request is its own context
	}
	res := req.End() // at 285 ms: no step since it started
	if !res.HasEnergy || res.EnergyMJ == 0 {
		t.Fatalf("End() between two steps = %d mJ (has %v): want the newest power over its life", res.EnergyMJ, res.HasEnergy)
	}
}
