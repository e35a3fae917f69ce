package simgpu

import (
	"math"
	"time"
)

// Job is one request running on every board of a [GPU], from
// [GPU.Begin] to [Job.End]: a prefill phase, then output tokens. It keeps
// its ground truth after End; the GPU forgets it then, so a Job no caller
// holds is garbage.
//
// All methods are safe for concurrent use; they take the GPU's mutex.
type Job struct {
	g           *GPU
	begin       int64 // ns since the GPU's start
	prefillEnd  int64
	inPrefill   bool
	powerFactor float64
	nominal     int64   // the prefill's length as drawn at Begin, ns
	rate        float64 // decode tokens/s, the job's weight in sharing decode power
	input       int
	cached      int // of input, served from a prefix cache: no prefill
	output      int64
	idx         int // index in g.active; -1 once ended
	truth       float64
}

// Begin starts a job now with a prompt of inputTokens (negative counts as
// zero) and returns it, as [GPU.BeginCached] with none of them cached.
func (g *GPU) Begin(inputTokens int) *Job { return g.BeginCached(inputTokens, 0) }

// BeginCached starts a job now with a prompt of inputTokens of which
// cachedTokens (clamped to [0, inputTokens]) are served from the server's
// prefix cache, and returns it. A cached token costs no prefill: the
// prefill starts now and lasts (PrefillBase + PrefillPerInputToken × u +
// PrefillPerSquaredKTokens × (u/1000)²) × the job's length factor for the
// u uncached tokens, unless NoPrefill is set or the length is zero; the
// job weighs u tokens in sharing prefill power, and JoulesPerInputToken ×
// u is charged now.
func (g *GPU) BeginCached(inputTokens, cachedTokens int) *Job {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.advance()
	inputTokens = max(inputTokens, 0)
	cachedTokens = min(max(cachedTokens, 0), inputTokens)
	u := inputTokens - cachedTokens
	lf, pf := 1.0, 1.0
	if s, ps := g.cfg.PrefillSpread, g.cfg.PrefillPowerSpread; s > 0 || ps > 0 {
		lf = 1 + s*(2*g.rng.Float64()-1)
		pf = 1 + ps*(2*g.rng.Float64()-1)
	}
	var dur int64
	if !g.cfg.NoPrefill {
		k := float64(u) / 1000
		nominal := float64(g.cfg.PrefillBase) + float64(g.cfg.PrefillPerInputToken)*float64(u) +
			float64(g.cfg.PrefillPerSquaredKTokens)*k*k
		dur = int64(math.Round(min(nominal*lf, math.MaxInt64/4)))
	}
	j := &Job{
		g:           g,
		begin:       g.cur,
		prefillEnd:  g.cur + dur,
		inPrefill:   dur > 0,
		powerFactor: pf,
		nominal:     dur,
		rate:        1e9 / float64(max(g.cfg.DecodeStep, 1)),
		input:       inputTokens,
		cached:      cachedTokens,
		idx:         len(g.active),
	}
	g.active = append(g.active, j)
	g.chargeTokens(j, g.cfg.JoulesPerInputToken*float64(u))
	return j
}

// prefillWeight is j's weight in sharing prefill power by token rate: the
// uncached prompt tokens it processes per second of its prefill (a prompt
// of none counts as one token). g.mu is held.
func (j *Job) prefillWeight() float64 {
	return float64(max(j.input-j.cached, 1)) / float64(max(j.nominal, 1))
}

// decodeWeight is j's weight in sharing decode power. g.mu is held.
func (j *Job) decodeWeight() float64 { return j.rate }

// SetDecodeRate sets j's decode rate in tokens per second: its weight in
// sharing the batch's decode power, and the length of its first decode
// step ([Job.FirstTokenAt]). A job whose rate is never set weighs
// 1/DecodeStep, as under continuous batching, where every decoding job
// gets one token per step. A non-positive or non-finite rate is ignored.
func (j *Job) SetDecodeRate(tokensPerSecond float64) {
	if !(tokensPerSecond > 0) || math.IsInf(tokensPerSecond, 0) {
		return
	}
	g := j.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.advance()
	j.rate = tokensPerSecond
}

// FirstTokenAt returns when j's first output token is due: one decode step
// (1/rate, or DecodeStep) after [Job.PrefillEnd]. A workload that produces
// its first token then gets the whole prefill and its first step.
func (j *Job) FirstTokenAt() time.Time {
	j.g.mu.Lock()
	defer j.g.mu.Unlock()
	step := time.Duration(math.Round(1e9 / j.rate))
	return j.g.start.Add(time.Duration(j.prefillEnd) + step)
}

// chargeTokens charges joules of token energy now, split evenly over the
// boards, to the boards and to j. g.mu is held.
func (g *GPU) chargeTokens(j *Job, joules float64) {
	if joules <= 0 {
		return
	}
	perBoard := joules * 1000 / float64(len(g.boards))
	for i := range g.boards {
		b := &g.boards[i]
		b.imp += b.gain * perBoard
		if g.window > 0 && g.inWindow(i, g.cur) {
			b.mimp += b.gain * perBoard * g.windowScale
		}
	}
	j.truth += g.gainSum * perBoard
}

// BeganAt returns the instant j began.
func (j *Job) BeganAt() time.Time {
	return j.g.start.Add(time.Duration(j.begin))
}

// PrefillEnd returns the instant j's prefill ends or ended. The physics
// fixes it at Begin; a call to Tokens or End before then moves it to that
// call's instant. A workload that waits until PrefillEnd before producing
// its first token gets the whole prefill. Without a prefill it is the
// Begin instant.
func (j *Job) PrefillEnd() time.Time {
	j.g.mu.Lock()
	defer j.g.mu.Unlock()
	return j.g.start.Add(time.Duration(j.prefillEnd))
}

// InputTokens returns the prompt length j began with.
func (j *Job) InputTokens() int { return j.input }

// CachedTokens returns how many of j's prompt tokens were served from the
// prefix cache.
func (j *Job) CachedTokens() int { return j.cached }

// OutputTokens returns the output tokens charged to j so far.
func (j *Job) OutputTokens() int64 {
	j.g.mu.Lock()
	defer j.g.mu.Unlock()
	return j.output
}

// Tokens charges n output tokens produced now: JoulesPerToken × n, times
// one noise factor, split over the boards at this instant. Called before
// PrefillEnd, it ends the prefill now. It does nothing when n ≤ 0 or after
// End.
func (j *Job) Tokens(n int) {
	g := j.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if n <= 0 || j.idx < 0 {
		return
	}
	g.advance()
	j.endPrefill()
	f := 1.0
	if g.cfg.Noise > 0 {
		f = 1 + g.cfg.Noise*(2*g.rng.Float64()-1)
	}
	j.output += int64(n)
	g.chargeTokens(j, g.cfg.JoulesPerToken*float64(n)*f)
}

// End finishes j now: it ends its prefill if still running and stops its
// share of idle power. Later calls do nothing.
func (j *Job) End() {
	g := j.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if j.idx < 0 {
		return
	}
	g.advance()
	j.endPrefill()
	last := g.active[len(g.active)-1]
	g.active[j.idx] = last
	last.idx = j.idx
	g.active[len(g.active)-1] = nil
	g.active = g.active[:len(g.active)-1]
	j.idx = -1
}

// Ended reports whether End has been called.
func (j *Job) Ended() bool {
	j.g.mu.Lock()
	defer j.g.mu.Unlock()
	return j.idx < 0
}

// endPrefill ends j's prefill at the current instant if it is running.
// g.mu is held and the physics advanced.
func (j *Job) endPrefill() {
	if j.inPrefill {
		j.inPrefill = false
		j.prefillEnd = j.g.cur
	}
}

// TrueEnergyMJ returns j's ground truth from Begin to now or to its End,
// in gained mJ: its prefill energy, its token energy and its share of idle
// power, as the package doc's Ground truth section defines them.
func (j *Job) TrueEnergyMJ() float64 {
	j.g.mu.Lock()
	defer j.g.mu.Unlock()
	j.g.advance()
	return j.truth
}
