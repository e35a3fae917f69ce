package ledger

import (
	"math"
	"testing"
)

// TestSilentRequestTakesTheMeanPrompt: a request that has reported
// nothing is weighed with the recent prompts' mean as its uncached input
// tokens, spread over its expected prefill, as its prefill's length and
// rate already are; a request that reported its prompt is weighed with
// its own; and the weighing before a model is usable, by tokens, leaves
// the mean out (it stands for no token reported).
func TestSilentRequestTakesTheMeanPrompt(t *testing.T) {
	g := newRig(t, Config{Horizon: 10e9})
	m := &g.l.model
	for range 4 {
		m.prefill.note(600)
	}
	silent, told := newAccount(1, nil), newAccount(1, nil)
	for _, r := range []*Account{silent, told} {
		g.l.Add(r)
	}
	g.l.Observe(0, 0, 0)
	told.AddInput(200)
	g.l.Observe(10e6, 0, 0)
	var buf featureBuf
	f := buildFeatures(g.l.reqs.active, &g.l.reqs.unowned.st, m, 0, 100e6, 0, true, false, &buf)
	if len(f.parts) != 2 {
		t.Fatalf("%d parts, want 2", len(f.parts))
	}
	if f.parts[0].r != silent { // adoption's order follows the inbox's shards
		f.parts[0], f.parts[1] = f.parts[1], f.parts[0]
	}
	if f.parts[0].r != silent || f.parts[1].r != told {
		t.Fatal("the parts are not the two requests")
	}
	// The mean counts the reported prompt too. No prefill time is
	// learned: a prefill is expected to end at once, so the whole prompt
	// falls at the start, in the interval.
	mean := m.prefill.meanTokens()
	if mean <= 200 || mean >= 600 {
		t.Fatalf("recent prompts' mean %.1f, want between the 200 and the 600s", mean)
	}
	if p := f.parts[0]; !p.meanIn || math.Abs(p.in-mean) > 1e-9 {
		t.Errorf("silent request: input %.1f (mean %v), want the mean prompt, %.1f", p.in, p.meanIn, mean)
	}
	if p := f.parts[1]; p.meanIn || math.Abs(p.in-200) > 1e-9 {
		t.Errorf("reported prompt: input %.1f (mean %v), want its own 200", p.in, p.meanIn)
	}
	if x := f.x[fInput]; math.Abs(x-(mean+200)) > 1e-9 {
		t.Errorf("the interval's input feature %.1f, want %.1f", x, mean+200)
	}
	// By tokens the reported prompt weighs fallbackInput of an output
	// token per input token, and the silent request, which weighs no
	// token of its own, the weight per active ns of those that do: the
	// same as the other, both active all along.
	weighTokens(&f)
	want := fallbackInput * 200
	if w := f.parts[1].weight; math.Abs(w-want) > 1e-9 {
		t.Errorf("by tokens, the reported prompt weighs %v, want %v", w, want)
	}
	if w := f.parts[0].weight; math.Abs(w-want) > 1e-6 {
		t.Errorf("by tokens, the silent request weighs %v, want %v (not the mean prompt's %v)", w, want, fallbackInput*mean)
	}
}

// TestPromptDrivenShareHoldsInputEnergy: the part of a request's weight
// that its prompt drives, which End's estimate rescales when the prompt
// arrives late (see reweighed), holds its input tokens' energy as well as
// its share of the prefill pool: a model that prices prefill by input
// tokens alone still has a prompt to rescale.
func TestPromptDrivenShareHoldsInputEnergy(t *testing.T) {
	var d devModel
	d.usable = true
	d.theta[fInput] = 0.01 // J per uncached input token; no prefill pool
	d.theta[fOutput] = 0.1
	f := featureSet{parts: []part{{in: 500, out: 2}, {out: 8}}}
	f.x[fStatic], f.x[fInput], f.x[fOutput] = 0.1, 500, 10
	// 5 + 1 J modelled: no residual.
	weighModel(&f, &d, 6, &prices{})
	if got, want := f.parts[0].pf, 5.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("prompt-driven part %v J, want its 500 input tokens' 5 J", got)
	}
	if got, want := f.parts[0].pfIn, 5.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("its input tokens' part %v J, want all of it, 5 J (no prefill pool)", got)
	}
	if got, want := f.parts[0].weight, 5.2; math.Abs(got-want) > 1e-9 {
		t.Errorf("weight %v J, want 5.2 (the weight is unchanged by it)", got)
	}
	if got := f.parts[1].pf; got != 0 {
		t.Errorf("no prompt: prompt-driven part %v J, want 0", got)
	}
	if got, want := f.parts[1].outW, 0.8; math.Abs(got-want) > 1e-9 {
		t.Errorf("output-driven part %v J, want its 8 tokens' 0.8 J", got)
	}

	// With a prefill pool too (100 W while any prefill runs, 10 ms of
	// it, all the first request's): 1 J of pool and 5 J of input tokens,
	// 7 J modelled with the output, no residual.
	d.theta[fPrefillBusy] = 100
	f = featureSet{parts: []part{{in: 500, out: 2, pfShare: 0.01 * nsPerSecond}, {out: 8}}}
	f.x[fStatic], f.x[fInput], f.x[fOutput], f.x[fPrefillBusy] = 0.1, 500, 10, 0.01
	weighModel(&f, &d, 7, &prices{})
	if got, in := f.parts[0].pf, f.parts[0].pfIn; math.Abs(got-6) > 1e-9 || math.Abs(in-5) > 1e-9 {
		t.Errorf("prompt-driven part %v J of which input tokens' %v J, want 6 J (1 J of pool) of which 5 J", got, in)
	}
}
