package otelenergy

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/otelenergy/otelenergy/internal/fakeclock"
	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/simgpu"
)

// The accuracy harness drives the real request and sampling paths (a
// Monitor over a simgpu GPU, on a fake clock shared by both, sampled by
// hand at DefaultInterval) with a seeded workload, and compares each
// request's final figure with the simulator's ground truth for it
// (simgpu's Job.TrueEnergyMJ: its prefill and decode energy plus its equal
// share of idle power at every instant). The simulator's physics is not
// the ledger's model: a staircase counter at a random phase, prefill power
// shared sublinearly by concurrent prefills, per-job prefill length and
// power factors. docs/attribution.md gives the figures.

// accScenario is a seeded workload.
type accScenario struct {
	// Concurrency request slots; each runs one request after another
	// with a random gap of up to MaxGap.
	Concurrency    int
	MinLen, MaxLen time.Duration
	MaxGap         time.Duration
	// Output token rate per request, drawn uniformly, in tokens/s.
	MinRate, MaxRate float64
	// Prompt length per request, reported as input tokens at its start.
	MinPrompt, MaxPrompt int
	// Chunk > 1 reports output tokens in chunks of that many.
	Chunk int
	// EndOnly is the fraction of requests that report their output
	// tokens only when they end.
	EndOnly float64
	// Duration is how long requests keep arriving; the harness then lets
	// them finish and runs past the horizon so every figure is final.
	Duration time.Duration
	// Periods are the counter update periods to run, each at a random
	// phase; the figures pool every run.
	Periods []time.Duration
	// GPU is the simulator's configuration (clock, period and seed are
	// set by the harness).
	GPU simgpu.Config
	// Idealized runs simgpu's idealized model.
	Idealized bool
	// WindowFrac > 0 makes the counter integrate only that fraction of
	// each period (simgpu's CounterWindow).
	WindowFrac float64
	// InputAtEnd reports the prompt's tokens only at the end, as a proxy
	// that reads them from a streamed response's final usage does.
	InputAtEnd bool
	// Busy from the start: the first requests start at once, not after a
	// second of idle, so the board is never seen idle before it serves.
	BusyFromStart bool
	// FirstAtPrefillEnd produces the first token when the prefill ends,
	// not one decode step later, as the previous simulator did.
	FirstAtPrefillEnd bool
	// Trace, when set, replaces the slots with a production-shaped
	// workload (see production_test.go); Concurrency, the lengths, rates
	// and prompts above are then unused.
	Trace *accTrace
	Seed  uint64
	// Pair names the scenario whose final figures this one's are compared
	// with, request by request (vs-stream%): the same requests on the
	// same physics, reported as they stream.
	Pair string
}

var accTarget = accScenario{
	Concurrency: 16,
	MinLen:      time.Second, MaxLen: 8 * time.Second,
	MaxGap:  200 * time.Millisecond,
	MinRate: 10, MaxRate: 60,
	MinPrompt: 50, MaxPrompt: 1000,
	Duration: 60 * time.Second,
	Periods:  []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond},
	Seed:     1,
}

func (s accScenario) with(f func(*accScenario)) accScenario {
	f(&s)
	return s
}

// accScenarios are the scenarios BenchmarkAttribution reports; the first
// three carry the targets of docs/attribution.md. The held-out ones
// change what the ledger was not developed against: periods, seeds, power
// levels and batch behaviour.
var accScenarios = append(slotScenarios, prodScenarios()...)

// namedScenario is a scenario with its benchmark name.
type namedScenario struct {
	name string
	sc   accScenario
}

// slotScenarios are the synthetic slot workloads.
var slotScenarios = []namedScenario{
	{"streaming", accTarget},
	{"chunks16", accTarget.with(func(s *accScenario) { s.Chunk = 16 })},
	{"endonly30", accTarget.with(func(s *accScenario) { s.EndOnly = 0.3 })},
	// Every client non-streaming: prompt and output both arrive in the
	// final usage, as through the proxy, so no request shows any timing.
	{"endonly-all", accTarget.with(func(s *accScenario) { s.EndOnly, s.InputAtEnd = 1, true })},
	{"lag30ms", accTarget.with(func(s *accScenario) { s.GPU.ReportLag = 30 * time.Millisecond })},
	{"jitter-gain", accTarget.with(func(s *accScenario) {
		s.GPU.UpdateJitter = 5 * time.Millisecond
		s.GPU.GainSpread = 0.05
		s.GPU.Noise = 0.2
	})},
	{"jitter5ms", accTarget.with(func(s *accScenario) { s.GPU.UpdateJitter = 5 * time.Millisecond })},
	{"jitter5ms-per-token", accTarget.with(func(s *accScenario) {
		s.GPU.UpdateJitter = 5 * time.Millisecond
		s.GPU.Decode = simgpu.DecodePerToken
	})},
	{"noise20", accTarget.with(func(s *accScenario) { s.GPU.Noise = 0.2 })},
	{"two-gpus", accTarget.with(func(s *accScenario) { s.GPU.Devices = 2 })},
	{"prefill-power-30", accTarget.with(func(s *accScenario) { s.GPU.PrefillPowerSpread = 0.3 })},
	// The previous simulator's sharing: k prefills draw √k × their mean
	// power, each its own power factor's part, whatever its prompt.
	{"sqrtk-power-factor", accTarget.with(func(s *accScenario) {
		s.GPU.PrefillShare = simgpu.ShareByPowerFactor
		s.GPU.PrefillPowerSpread = 0.3
	})},
	// Decode as a fixed energy per token, whatever the batch.
	{"per-token-decode", accTarget.with(func(s *accScenario) { s.GPU.Decode = simgpu.DecodePerToken })},
	// Everything as the previous simulator had it.
	{"previous-physics", accTarget.with(func(s *accScenario) {
		s.GPU.PrefillShare = simgpu.ShareByPowerFactor
		s.GPU.Decode = simgpu.DecodePerToken
		s.FirstAtPrefillEnd = true
	})},
	{"first-token-at-prefill-end", accTarget.with(func(s *accScenario) { s.FirstAtPrefillEnd = true })},
	{"windowed-counter", accTarget.with(func(s *accScenario) { s.WindowFrac = 0.25 })},
	{"heldout-periods", accTarget.with(func(s *accScenario) {
		s.Periods = []time.Duration{33 * time.Millisecond, 75 * time.Millisecond}
		s.Seed = 17
	})},
	{"heldout-busy-from-start", accTarget.with(func(s *accScenario) {
		s.BusyFromStart = true
		s.MaxGap = 20 * time.Millisecond
		s.Seed = 61
	})},
	{"input-at-end", accTarget.with(func(s *accScenario) { s.InputAtEnd = true })},
	{"heldout-seeds", accTarget.with(func(s *accScenario) { s.Seed = 29 })},
	// An H200-like board: lower idle, decode memory-bound at far lower
	// power, prefill near a higher limit.
	{"heldout-power", accTarget.with(func(s *accScenario) {
		s.GPU.IdleWatts = 70
		s.GPU.PrefillWatts = 450
		s.GPU.DecodeCurve = []simgpu.BatchPower{
			{Batch: 1, Watts: 70}, {Batch: 8, Watts: 160}, {Batch: 16, Watts: 190}, {Batch: 64, Watts: 260}, {Batch: 256, Watts: 330},
		}
		s.GPU.JoulesPerToken = 0.05
		s.Seed = 41
	})},
	// Continuous batching: every request decodes at the same rate, and a
	// busier batch: 32 slots of shorter requests.
	{"heldout-engine", accTarget.with(func(s *accScenario) {
		s.Concurrency = 32
		s.MinRate, s.MaxRate = 25, 25
		s.MinLen, s.MaxLen = 500*time.Millisecond, 4*time.Second
		s.MaxPrompt = 2000
		s.Seed = 53
	})},
	{"idealized", accTarget.with(func(s *accScenario) { s.Idealized = true })},
	// The synthetic physics variant of issue 33: a 20 ms counter, 400 W
	// of prefill and 120 W idle, clients reporting in chunks of 16.
	{"heldout-20ms-400w/chunks16", accTarget.with(func(s *accScenario) {
		s.Periods = []time.Duration{20 * time.Millisecond}
		s.GPU.PrefillWatts, s.GPU.IdleWatts = 400, 120
		s.Chunk = 16
	})},
}

// accFigures is the outcome of a scenario.
type accFigures struct {
	Requests                         int
	MeanErrPct, P99ErrPct, MaxErrPct float64
	EstMeanErrPct, EstP99ErrPct      float64
	// EstNSMeanErrPct and EstNSP99ErrPct are End's estimate's error over
	// the requests that reported their output only at the end (the
	// non-streaming clients), whose target differs (issue 22).
	EstNSMeanErrPct, EstNSP99ErrPct float64
	// SplitMJ is what the ledger split; AttributedMJ, UnattributedMJ and
	// OtherMJ must add up to it exactly.
	SplitMJ, AttributedMJ, UnattributedMJ, OtherMJ uint64
	ConservationPct                                float64
	Coefficients                                   ledger.Coefficients
	// Final and Estimate are each request's signed error, in %, of its
	// final figure and of End's estimate against the truth, EstFinal of
	// End's estimate against the final figure, and FinalMJ the final
	// figure; Period is its counter period, EndOnly whether it reported
	// its output only at the end.
	Final, Estimate, EstFinal, FinalMJ []float64
	// EstFinalMeanPct and EstFinalP99Pct summarize EstFinal.
	EstFinalMeanPct, EstFinalP99Pct float64
	Period                          []time.Duration
	EndOnly                         []bool
	// FinalLatencyMS is, per request of a production trace, how long
	// after its End its figure became final, in ms, as seen by the
	// sampler: what a caller that waits for it (Request.WaitFinal) waits.
	FinalLatencyMS []float64
}

func (f accFigures) String() string {
	return fmt.Sprintf("n=%d err mean %.3f%% p99 %.3f%% max %.3f%% (estimate at End: mean %.2f%% p99 %.2f%%; against the final figure %.2f%% / %.2f%%), conservation %.5f%% of %d mJ, model %+v",
		f.Requests, f.MeanErrPct, f.P99ErrPct, f.MaxErrPct, f.EstMeanErrPct, f.EstP99ErrPct, f.EstFinalMeanPct, f.EstFinalP99Pct,
		f.ConservationPct, f.SplitMJ, f.Coefficients)
}

type accRequest struct {
	req      *Request
	job      *simgpu.Job
	index    int   // its place in a trace's plan
	start    int64 // ms
	end      int64
	rate     float64
	next     float64 // ms of the next token
	pending  int     // tokens produced but not reported
	endOnly  bool
	estimate uint64
	dbgMJ    uint64
	dbgThru  int64
}

// runAccuracy runs sc at every period and pools the figures.
func runAccuracy(tb testing.TB, sc accScenario) accFigures {
	tb.Helper()
	var f accFigures
	for i, p := range sc.Periods {
		run := runAccuracyOnce
		if sc.Trace != nil {
			run = runTraceOnce
		}
		e, es, g := run(tb, sc, p, sc.Seed*1000+uint64(i))
		f.Final, f.Estimate = append(f.Final, e...), append(f.Estimate, es...)
		f.EstFinal, f.FinalMJ = append(f.EstFinal, g.EstFinal...), append(f.FinalMJ, g.FinalMJ...)
		f.EndOnly = append(f.EndOnly, g.EndOnly...)
		for range e {
			f.Period = append(f.Period, p)
		}
		f.SplitMJ += g.SplitMJ
		f.AttributedMJ += g.AttributedMJ
		f.UnattributedMJ += g.UnattributedMJ
		f.OtherMJ += g.OtherMJ
		f.Coefficients = g.Coefficients
		f.FinalLatencyMS = append(f.FinalLatencyMS, g.FinalLatencyMS...)
	}
	f.Requests = len(f.Final)
	f.MeanErrPct, f.P99ErrPct, f.MaxErrPct = summarize(f.Final)
	f.EstMeanErrPct, f.EstP99ErrPct, _ = summarize(f.Estimate)
	f.EstFinalMeanPct, f.EstFinalP99Pct, _ = summarize(f.EstFinal)
	var ns []float64
	for i, e := range f.Estimate {
		if f.EndOnly[i] {
			ns = append(ns, e)
		}
	}
	f.EstNSMeanErrPct, f.EstNSP99ErrPct, _ = summarize(ns)
	diff := int64(f.AttributedMJ+f.UnattributedMJ+f.OtherMJ) - int64(f.SplitMJ)
	f.ConservationPct = math.Abs(float64(diff)) / float64(max(f.SplitMJ, 1)) * 100
	return f
}

// summarize returns the mean, 99th percentile and maximum of the
// absolute values of xs.
func summarize(xs []float64) (mean, p99, maxv float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := make([]float64, len(xs))
	for i, x := range xs {
		s[i] = math.Abs(x)
	}
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	idx := int(math.Ceil(0.99*float64(len(s)))) - 1
	return sum / float64(len(s)), s[max(idx, 0)], s[len(s)-1]
}

func runAccuracyOnce(tb testing.TB, sc accScenario, period time.Duration, seed uint64) (errs, est []float64, f accFigures) {
	clock := fakeclock.New(fakeclock.Epoch())
	t0 := clock.Now()
	gc := sc.GPU
	gc.UpdatePeriod, gc.Seed, gc.Now = period, seed, clock.Now
	if sc.WindowFrac > 0 {
		gc.CounterWindow = time.Duration(float64(period) * sc.WindowFrac)
	}
	if sc.Idealized {
		gc = simgpu.Idealized(gc)
	}
	gpu, err := simgpu.New(gc)
	if err != nil {
		tb.Fatal(err)
	}
	mon, err := NewMonitor(gpu, WithClock(clock.Now), WithMeterProvider(noop.NewMeterProvider()))
	if err != nil {
		tb.Fatal(err)
	}
	defer mon.Shutdown(context.Background())
	rng := rand.New(rand.NewPCG(seed, 0xacc))
	interval := DefaultInterval.Milliseconds()
	nextSample := int64(0)
	slots := make([]*accRequest, sc.Concurrency)
	free := make([]int64, sc.Concurrency) // ms at which each slot starts its next request
	for i := range free {
		free[i] = 1000 + rng.Int64N(int64(sc.MaxGap/time.Millisecond)+1)
		if sc.BusyFromStart {
			free[i] -= 980 // after the first sample, which tracking needs
		}
	}
	var done []*accRequest
	durMS := sc.Duration.Milliseconds()
	horizon := int64(ledgerHorizonMS) + 2000
	lastEnd := int64(0)
	ctx := context.Background()
	for ms := int64(0); ; ms++ {
		clock.Set(t0.Add(time.Duration(ms) * time.Millisecond))
		for i, r := range slots {
			if r == nil {
				if ms >= free[i] && ms < durMS+1000 {
					slots[i] = startAcc(mon, gpu, rng, sc, ctx, ms)
				}
				continue
			}
			stepAcc(mon, r, sc, ms)
			if ms >= r.end {
				finishAcc(mon, r, sc)
				done = append(done, r)
				slots[i] = nil
				free[i] = ms + 1 + rng.Int64N(int64(sc.MaxGap/time.Millisecond)+1)
				lastEnd = ms
			}
		}
		if ms >= nextSample {
			mon.Sample()
			nextSample += interval
		}
		if os.Getenv("OTELENERGY_ACC_COEF") != "" && ms%5000 == 0 {
			tb.Logf("t=%ds %+v", ms/1000, mon.ledger.Coefficients())
		}
		if ms > durMS+1000 && allNil(slots) && ms > lastEnd+horizon {
			break
		}
	}
	return f.collect(tb, mon, gpu, done, horizon)
}

// collect checks that every request in done is final and returns their
// signed errors in %, of the final figure and of End's estimate, against
// the simulator's truth, with the monitor's totals.
func (f accFigures) collect(tb testing.TB, mon *Monitor, gpu *simgpu.GPU, done []*accRequest, horizon int64) (errs, est []float64, _ accFigures) {
	for _, r := range done {
		st := r.req.st
		if !st.Final() {
			tb.Fatalf("request [%d, %d] ms not final %d ms after the last request ended", r.start, r.end, horizon)
		}
		truth := r.job.TrueEnergyMJ()
		if truth <= 0 {
			continue
		}
		if v := os.Getenv("OTELENERGY_ACC_DEBUG"); v != "" {
			threshold, err := strconv.ParseFloat(v, 64)
			if err != nil {
				threshold = 7
			}
			got := st.EnergyMJ()
			if os.Getenv("OTELENERGY_ACC_DEBUG_EST") != "" {
				got = r.estimate // judge End's estimate instead
			}
			if e := math.Abs(float64(got)-truth) / truth * 100; e >= threshold {
				pf, _ := st.FirstToken()
				tb.Logf("final %+.0f%% [%d, %d] ms rate %.0f prompt %d out %d endOnly %v: truth %.0f final %d est %d; prefill end %d, ledger %d",
					(float64(st.EnergyMJ())-truth)/truth*100, r.start, r.end, r.rate, r.job.InputTokens(), r.job.OutputTokens(), r.endOnly, truth, st.EnergyMJ(), r.estimate,
					r.job.PrefillEnd().Sub(gpu.Start()).Milliseconds(), pf/1e6)

			}
		}
		errs = append(errs, (float64(st.EnergyMJ())-truth)/truth*100)
		est = append(est, (float64(r.estimate)-truth)/truth*100)
		final := float64(max(st.EnergyMJ(), 1))
		f.EstFinal = append(f.EstFinal, (float64(r.estimate)-final)/final*100)
		f.FinalMJ = append(f.FinalMJ, float64(st.EnergyMJ()))
		f.EndOnly = append(f.EndOnly, r.endOnly)
		f.AttributedMJ += st.EnergyMJ()
	}
	f.SplitMJ = mon.ledger.SplitMJ()
	f.UnattributedMJ = mon.ledger.Unattributed()
	f.OtherMJ = mon.ledger.OtherProcesses()
	f.Coefficients = mon.ledger.Coefficients()
	return errs, est, f
}

// ledgerHorizonMS is the default horizon in ms.
const ledgerHorizonMS = 10_000

func allNil(s []*accRequest) bool {
	for _, r := range s {
		if r != nil {
			return false
		}
	}
	return true
}

func startAcc(mon *Monitor, gpu *simgpu.GPU, rng *rand.Rand, sc accScenario, ctx context.Context, ms int64) *accRequest {
	length := sc.MinLen + time.Duration(rng.Int64N(int64(sc.MaxLen-sc.MinLen)+1))
	prompt := sc.MinPrompt + rng.IntN(sc.MaxPrompt-sc.MinPrompt+1)
	r := &accRequest{
		req:     mon.StartRequest(ctx),
		job:     gpu.Begin(prompt),
		start:   ms,
		end:     ms + length.Milliseconds(),
		rate:    sc.MinRate + rng.Float64()*(sc.MaxRate-sc.MinRate),
		endOnly: rng.Float64() < sc.EndOnly,
	}
	if !sc.InputAtEnd {
		mon.AddInputTokens(r.req, prompt)
	}
	r.job.SetDecodeRate(r.rate)
	// The first token comes one decode step after the simulated prefill
	// ends; the clock and the GPU start together.
	first := r.job.FirstTokenAt()
	if sc.FirstAtPrefillEnd {
		first = r.job.PrefillEnd()
	}
	r.next = float64(first.Sub(gpu.Start())) / float64(time.Millisecond)
	return r
}

func stepAcc(mon *Monitor, r *accRequest, sc accScenario, ms int64) {
	n := 0
	for r.next <= float64(ms) && ms < r.end {
		n++
		r.next += 1000 / r.rate
	}
	if n == 0 {
		return
	}
	r.job.Tokens(n)
	r.pending += n
	chunk := max(sc.Chunk, 1)
	if !r.endOnly && r.pending >= chunk {
		mon.AddTokens(r.req, r.pending)
		r.pending = 0
	}
}

// reportPrompt reports r's prompt, and how much of it the prefix cache
// served.
func reportPrompt(mon *Monitor, r *accRequest) {
	mon.AddInputTokens(r.req, r.job.InputTokens())
	if c := r.job.CachedTokens(); c > 0 {
		mon.AddCachedInputTokens(r.req, c)
	}
}

func finishAcc(mon *Monitor, r *accRequest, sc accScenario) {
	if r.pending > 0 {
		mon.AddTokens(r.req, r.pending)
		r.pending = 0
	}
	if sc.InputAtEnd {
		reportPrompt(mon, r)
	}
	r.job.End()
	r.dbgMJ = r.req.st.EnergyMJ()
	res := r.req.End()
	r.estimate = res.EnergyMJ
}

// scenarioNamed returns the scenario of accScenarios called name.
func scenarioNamed(tb testing.TB, name string) accScenario {
	for _, s := range accScenarios {
		if s.name == name {
			return s.sc
		}
	}
	tb.Fatalf("no scenario %q", name)
	return accScenario{}
}

// vsPair returns the mean and 99th percentile of the absolute relative
// differences, in %, between the final figures got and those of the same
// requests in want; false when want is missing or not the same requests.
func vsPair(got, want []float64) (mean, p99 float64, ok bool) {
	if len(want) == 0 || len(want) != len(got) {
		return 0, 0, false
	}
	d := make([]float64, len(got))
	for i := range got {
		d[i] = (got[i] - want[i]) / max(want[i], 1) * 100
	}
	mean, p99, _ = summarize(d)
	return mean, p99, true
}

// TestAttributionAccuracy holds the ledger to its figures in
// docs/attribution.md on the hardware-like simulator, and checks that it
// conserves energy exactly. Each bound is the figure measured with a
// margin for changes elsewhere: the final figure's mean and p99, then
// End's estimate's. The first three scenarios carry the project's
// targets (2% / 5%, 3% / 8%, 5% / 15%; the estimate 5% / 20% on
// streaming); the held-out ones change what the ledger was not developed
// against.
func TestAttributionAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("the accuracy harness simulates minutes of serving")
	}
	bounds := map[string][4]float64{
		"streaming":                  {1, 5, 1.2, 7},
		"chunks16":                   {1.6, 10, 2.2, 15},
		"endonly30":                  {1.8, 11.5, 4.5, 42},
		"first-token-at-prefill-end": {1, 6.5, 1.2, 7},
		"heldout-periods":            {1.1, 4.5, 1.3, 5},
		"heldout-seeds":              {1, 6, 1.2, 9},
		"heldout-power":              {1.6, 8.5, 2.2, 25},
		"heldout-engine":             {2.5, 16, 3.2, 26},
		// Known weaknesses (docs/attribution.md): held to what they are.
		"heldout-busy-from-start": {7, 25, 7.5, 32},
		"input-at-end":            {3.3, 18.5, 3.5, 21},
		"endonly-all":             {16.5, 78, 27, 100},
		// Production traces (production_test.go), at the smoke size.
		"prod-conversation/streaming":   {1.4, 6, 1.4, 6},
		"prod-conversation/endonly30":   {2.3, 12.5, 4, 28},
		"prod-conversation/endonly-all": {12, 42, 14.5, 50},
		"prod-code/streaming":           {2.7, 12.5, 5.5, 25},
		// No first token seen (outputs shorter than a chunk, or every
		// client reporting at its end): each prefill is placed by the
		// whole-request fit of the model stage.
		"prod-code/chunks16":            {4.5, 24, 15, 80},
		"prod-code/endonly-all":         {4, 21, 35, 100},
		"prod-long-prompts/endonly-all": {6.5, 40, 65, 270},
		// Long prefills hold the model's learning back, then release
		// seconds of intervals at once: the splits that follow must use a
		// model solved over them.
		"prod-long-prompts/streaming": {4.5, 18, 5.5, 24},
		"prod-code-control/streaming": {1.9, 15, 2.3, 21},
		// Every client non-streaming on the ledger's own physics: End's
		// estimate of the first requests, before the model is learned.
		"prod-conversation-control/endonly-all": {2, 11, 2.3, 11},
		// Every client non-streaming under continuous batching: the
		// whole-request fit's step follows the batch, and the batch's
		// rate starts from the first requests' own.
		"prod-conversation-b/endonly-all": {13.5, 46, 19, 75},
		"prod-concurrent256/endonly-all":  {27, 78.5, 26.5, 80.5},
		"prod-reasoning/endonly-all":      {4, 28, 5.5, 34},
		"prod-reasoning/endonly30":        {1, 4, 1, 3.5},
		// The public BurstGPT trace's head, replayed 400 times faster.
		"prod-burstgpt/streaming": {4, 22, 4.2, 23},
	}
	scenarios := slices.Clone(accScenarios)
	for _, s := range accScenarios {
		if s.name == "prod-code-control/streaming" {
			// At a 100 ms counter a burst's prompts, charged at arrival,
			// fill the intervals where they start: End's estimate must not
			// carry that as the requests' power past their prefill.
			scenarios = append(scenarios, namedScenario{"prod-code-control/streaming/100ms",
				s.sc.with(func(sc *accScenario) { sc.Periods = []time.Duration{100 * time.Millisecond} })})
		}
	}
	bounds["prod-code-control/streaming/100ms"] = [4]float64{5.5, 55, 7.5, 65}
	for _, s := range scenarios {
		b, ok := bounds[s.name]
		if !ok {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			f := runAccuracy(t, s.sc)
			t.Log(f)
			if f.AttributedMJ+f.UnattributedMJ+f.OtherMJ != f.SplitMJ {
				t.Errorf("conservation: %d + %d + %d != %d mJ", f.AttributedMJ, f.UnattributedMJ, f.OtherMJ, f.SplitMJ)
			}
			if f.MeanErrPct > b[0] || f.P99ErrPct > b[1] {
				t.Errorf("final: error mean %.2f%% p99 %.2f%%, bounds %.1f%% and %.1f%%", f.MeanErrPct, f.P99ErrPct, b[0], b[1])
			}
			if f.EstMeanErrPct > b[2] || f.EstP99ErrPct > b[3] {
				t.Errorf("End's estimate: error mean %.2f%% p99 %.2f%%, bounds %.1f%% and %.1f%%", f.EstMeanErrPct, f.EstP99ErrPct, b[2], b[3])
			}
		})
	}
}

// TestAttributionAccuracyOne runs the scenario OTELENERGY_ACC_QUICK names
// (at the counter period OTELENERGY_ACC_PERIOD alone, when set) and logs
// its figures; with OTELENERGY_ACC_DEBUG it logs every request whose final
// figure is off by at least that many percent (7 if it is not a number),
// or whose End() estimate is, with OTELENERGY_ACC_DEBUG_EST set too. It is
// for working on the ledger and skips otherwise.
func TestAttributionAccuracyOne(t *testing.T) {
	name := os.Getenv("OTELENERGY_ACC_QUICK")
	if name == "" {
		t.Skip("set OTELENERGY_ACC_QUICK to a scenario's name")
	}
	for _, s := range accScenarios {
		if s.name != name {
			continue
		}
		sc := s.sc
		if p := os.Getenv("OTELENERGY_ACC_PERIOD"); p != "" {
			d, err := time.ParseDuration(p)
			if err != nil {
				t.Fatal(err)
			}
			sc.Periods = []time.Duration{d}
		}
		f := runAccuracy(t, sc)
		t.Log(f)
		if s.sc.Pair != "" {
			ps := scenarioNamed(t, s.sc.Pair)
			ps.Periods = sc.Periods
			if mean, p99, ok := vsPair(f.FinalMJ, runAccuracy(t, ps).FinalMJ); ok {
				t.Logf("final figures against %s: mean %.2f%% p99 %.2f%%", s.sc.Pair, mean, p99)
			}
		}
		return
	}
	t.Fatalf("no scenario %q", name)
}

// BenchmarkAttribution reports each scenario's per-request error against
// the simulator's ground truth, pooled over its counter periods: of the
// final figure (err%-mean, err%-p99), of End's estimate (est%-mean,
// est%-p99; over the clients that report only at the end, est%-ns-mean
// and est%-ns-p99), and how far the split is from conserving energy
// (conservation%). With OTELENERGY_ACC_OUT set to a path, it writes every
// request's signed errors there as tab-separated values (scenario,
// period in ms, final %, estimate %), which tools/accplot draws.
func BenchmarkAttribution(b *testing.B) {
	var out []string
	finals := map[string][]float64{} // the final figures of each scenario run, for its pairs
	for _, s := range accScenarios {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			var f accFigures
			for range b.N {
				f = runAccuracy(b, s.sc)
			}
			b.ReportMetric(f.MeanErrPct, "err%-mean")
			b.ReportMetric(f.P99ErrPct, "err%-p99")
			b.ReportMetric(f.ConservationPct, "conservation%")
			b.ReportMetric(f.EstMeanErrPct, "est%-mean")
			b.ReportMetric(f.EstP99ErrPct, "est%-p99")
			b.ReportMetric(f.EstFinalMeanPct, "est-final%-mean")
			b.ReportMetric(f.EstFinalP99Pct, "est-final%-p99")
			finals[s.name] = f.FinalMJ
			if s.sc.Pair != "" {
				if _, ok := finals[s.sc.Pair]; !ok {
					finals[s.sc.Pair] = runAccuracy(b, scenarioNamed(b, s.sc.Pair)).FinalMJ
				}
				if mean, p99, ok := vsPair(f.FinalMJ, finals[s.sc.Pair]); ok {
					b.ReportMetric(mean, "vs-stream%-mean")
					b.ReportMetric(p99, "vs-stream%-p99")
				}
			}
			if slices.Contains(f.EndOnly, true) {
				b.ReportMetric(f.EstNSMeanErrPct, "est%-ns-mean")
				b.ReportMetric(f.EstNSP99ErrPct, "est%-ns-p99")
			}
			if lat := f.FinalLatencyMS; len(lat) > 0 {
				slices.Sort(lat)
				b.ReportMetric(lat[len(lat)/2], "final-ms-p50")
				b.ReportMetric(lat[max(0, int(math.Ceil(0.99*float64(len(lat))))-1)], "final-ms-p99")
			}
			b.Logf("%s: %v", s.name, f)
			for i := range f.Final {
				out = append(out, fmt.Sprintf("%s\t%d\t%.4f\t%.4f", s.name, f.Period[i].Milliseconds(), f.Final[i], f.Estimate[i]))
			}
		})
	}
	if path := os.Getenv("OTELENERGY_ACC_OUT"); path != "" && len(out) > 0 {
		data := "scenario\tperiod_ms\tfinal_pct\testimate_pct\n" + strings.Join(out, "\n") + "\n"
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
