package simgpu

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ErrInvalidConfig reports a [Config] that [New] cannot use: a negative,
// non-finite or out-of-range parameter. New wraps it with %w.
var ErrInvalidConfig = errors.New("simgpu: invalid configuration")

// Defaults that [New] applies to a [Config] field left zero.
const (
	DefaultDevices              = 1
	DefaultIdleWatts            = 100.0
	DefaultJoulesPerToken       = 0.15
	DefaultPrefillWatts         = 300.0
	DefaultPrefillBase          = 80 * time.Millisecond
	DefaultPrefillPerInputToken = 250 * time.Microsecond
	DefaultPrefillSpread        = 0.3
	DefaultPrefillPowerSpread   = 0.1
	DefaultUpdatePeriod         = 100 * time.Millisecond
	DefaultInitialCounter       = 1_000_000
	// DefaultBatchJoulesPerToken is JoulesPerToken under [DecodeBatch]:
	// the small part of decode energy that scales with the tokens
	// themselves (sampling, the KV cache's growth), beside the batch's
	// busy power.
	DefaultBatchJoulesPerToken = 0.02
	DefaultDecodeStep          = 25 * time.Millisecond
)

// PrefillShare is how concurrent prefills share a board's prefill power.
type PrefillShare int

const (
	// ShareByTokenRate, the default, shares the prefill power among the
	// jobs in prefill by their prompt tokens per unit of prefill time:
	// batched prefill is compute-bound, and each job's part of the
	// compute is the prompt tokens it processes.
	ShareByTokenRate PrefillShare = iota
	// ShareByPowerFactor shares it by each job's power factor, as if every
	// prefill drew its own power whatever its prompt.
	ShareByPowerFactor
)

// DecodeModel is how decode draws energy.
type DecodeModel int

const (
	// DecodeBatch, the default, draws decode as power: with n jobs
	// decoding, each board draws DecodeCurve(n) above idle, shared among
	// the decoding jobs by their token rates ([Job.SetDecodeRate]), plus
	// JoulesPerToken per output token. Decode is memory-bound, so the
	// power rises with the batch far slower than the tokens do, and the
	// energy per token falls with the batch.
	DecodeBatch DecodeModel = iota
	// DecodePerToken draws decode only as JoulesPerToken per output token,
	// whatever the batch.
	DecodePerToken
)

// BatchPower is one point of a decode power curve: Watts above idle per
// board while Batch jobs decode.
type BatchPower struct {
	Batch int
	Watts float64
}

// DefaultDecodeCurve is decode power above a 100 W idle per board, from
// the ML.ENERGY leaderboard (v3, vLLM, Llama-3.1-8B on one H100: board
// power 486 W at batch 8, 513 W at 16, ... 688 W at 512), with a single
// decoding request at 300 W, where memory-bound decode of a small batch
// lies. Between points the power is linear in log2(batch); past the last
// point it stays flat.
var DefaultDecodeCurve = []BatchPower{
	{1, 200}, {8, 386}, {16, 413}, {32, 460}, {64, 510}, {128, 569}, {256, 591}, {512, 591},
}

// Limits that [New] enforces.
const (
	MaxDevices      = 1024
	MinUpdatePeriod = time.Millisecond
	MaxUpdatePeriod = time.Second
	MaxReportLag    = 10 * time.Second
)

// Defaults of [Idealized], the old simulator's model.
const (
	IdealizedIdleWatts      = 60.0
	IdealizedJoulesPerToken = 0.3
	// IdealizedInputTokenRatio is JoulesPerInputToken over JoulesPerToken
	// in [Idealized] when JoulesPerInputToken is left zero.
	IdealizedInputTokenRatio = 0.1
)

// Config configures a [GPU]. The zero value is a hardware-like single board:
// every field left zero takes the default its doc names. A Config is a plain
// value and may be copied.
type Config struct {
	// Devices is the number of boards. A job runs on all of them at once,
	// as under tensor parallelism. Default [DefaultDevices]; at most
	// [MaxDevices].
	Devices int

	// IdleWatts is each board's power with no work, in W. Default
	// [DefaultIdleWatts] (an H100 with a model loaded).
	IdleWatts float64

	// JoulesPerToken is the decode energy of one output token, in J, for
	// the whole job: each board is charged JoulesPerToken / Devices.
	// Default [DefaultBatchJoulesPerToken] under [DecodeBatch], where the
	// batch's power carries most of decode, and [DefaultJoulesPerToken]
	// (Llama-3.1-8B on H100 at batch 64) under [DecodePerToken].
	JoulesPerToken float64

	// Decode selects decode's physics. Default [DecodeBatch].
	Decode DecodeModel

	// DecodeCurve is the decode power above idle per board against the
	// number of jobs decoding, under [DecodeBatch]: points in ascending
	// Batch (at least 1) with non-negative Watts; the power is linear in
	// log2(batch) between points, proportional to the batch below the
	// first and flat past the last. Nil selects [DefaultDecodeCurve].
	DecodeCurve []BatchPower

	// DecodeStep is the time from a job's prefill end to its first token,
	// one decode step, for a job whose rate is not set
	// ([Job.SetDecodeRate]); a job with a rate takes 1/rate. It also
	// gives such a job its weight in sharing decode power (1/DecodeStep
	// tokens/s). Default [DefaultDecodeStep].
	DecodeStep time.Duration

	// PrefillShare selects how concurrent prefills share prefill power.
	// Default [ShareByTokenRate].
	PrefillShare PrefillShare

	// CounterWindow, when non-zero, makes the counter integrate only the
	// last CounterWindow of every step's period before its sample instant,
	// scaled by UpdatePeriod / CounterWindow, as a counter built on a
	// part-time power sensor would (about 25 ms of every 100 ms on
	// A100/H100). The truth stays the energy really consumed. It must not
	// exceed UpdatePeriod. Default 0: the counter integrates everything.
	CounterWindow time.Duration

	// JoulesPerInputToken is a fixed energy per prompt token, in J for the
	// whole job, charged at [GPU.Begin] and split over the boards like
	// JoulesPerToken. Default 0: in the hardware-like model a prompt costs
	// prefill power over the prefill's length instead. [Idealized] sets it.
	JoulesPerInputToken float64

	// NoPrefill removes the prefill phase: [Job.PrefillEnd] is the Begin
	// instant and no prefill power is drawn. [Idealized] sets it.
	NoPrefill bool

	// PrefillWatts is the extra power, in W, that each board draws for one
	// job alone in prefill with a power factor of 1. Concurrent prefills
	// share it sublinearly; see the package doc's Physics section. Default
	// [DefaultPrefillWatts].
	PrefillWatts float64

	// PrefillBase and PrefillPerInputToken set a job's nominal prefill
	// length, PrefillBase + PrefillPerInputToken × input tokens, which the
	// job's length factor then scales. Defaults [DefaultPrefillBase] and
	// [DefaultPrefillPerInputToken].
	PrefillBase          time.Duration
	PrefillPerInputToken time.Duration

	// PrefillPerSquaredKTokens adds a term quadratic in the prompt to the
	// nominal prefill length: this much per (thousand input tokens)²,
	// as attention makes long prompts superlinear. Default 0: linear.
	PrefillPerSquaredKTokens time.Duration

	// PrefillSpread is the relative spread s of a factor drawn per job,
	// uniform in [1-s, 1+s), that scales its prefill length. It must be
	// below 1. Zero selects [DefaultPrefillSpread]; a negative value
	// selects no spread (the factor is exactly 1).
	PrefillSpread float64

	// PrefillPowerSpread is the same for a second factor, drawn
	// independently, that scales the job's prefill power: kernels and
	// prompts differ in how hard they load the board. Zero selects
	// [DefaultPrefillPowerSpread]; negative selects none.
	PrefillPowerSpread float64

	// UpdatePeriod is the time between counter steps. Default
	// [DefaultUpdatePeriod]; it must lie in [[MinUpdatePeriod],
	// [MaxUpdatePeriod]].
	UpdatePeriod time.Duration

	// Phase offsets the counter steps from the GPU's creation: board b
	// steps at creation + phase_b + k × UpdatePeriod. Zero (the default)
	// draws each board's phase from Seed, uniform in [0, UpdatePeriod), as
	// boards whose drivers started at unrelated instants have. A positive
	// value gives every board the phase Phase mod UpdatePeriod, so a
	// multiple of UpdatePeriod aligns the steps with creation. Negative is
	// invalid.
	Phase time.Duration

	// UpdateJitter moves each step instant by its own offset, uniform in
	// [-UpdateJitter, +UpdateJitter] and fixed by Seed, the board and the
	// step's index. It must be below UpdatePeriod / 2, so that steps keep
	// their order. Default 0.
	UpdateJitter time.Duration

	// ReportLag makes a step published at τ report the energy consumed up
	// to τ - ReportLag. Default 0; at most [MaxReportLag].
	ReportLag time.Duration

	// TokensAtRead makes token energy (decode and input tokens) reach the
	// counter at the read that first sees a step rather than at the step's
	// sample instant; see the package doc's Counter section. [Idealized]
	// sets it.
	TokensAtRead bool

	// Gain is the counter's multiplicative error against the energy really
	// consumed, the same for every board before GainSpread. Default 1.
	Gain float64

	// GainSpread draws each board's gain from Seed as Gain × u, u uniform
	// in [1-GainSpread, 1+GainSpread). It must be below 1. Default 0.
	GainSpread float64

	// Noise is the relative amplitude of uniform noise on decode energy:
	// each [Job.Tokens] call draws one factor in [1-Noise, 1+Noise) for
	// all its tokens. It must be below 1. Default 0.
	Noise float64

	// CounterMax is the largest counter value before it wraps to zero.
	// Zero means the full uint64 range, as for NVML.
	CounterMax uint64

	// InitialCounter is every counter's value at creation, as on a driver
	// loaded a while ago. Set it just below CounterMax to make the counters
	// wrap mid-run. Default [DefaultInitialCounter] mJ.
	InitialCounter uint64

	// RampTime, when non-zero, gives the boards a power state, as real
	// boards raise and lower their clocks with their load: a level in
	// [0, 1], 0 at creation, that rises towards 1 with this time constant
	// while any job is active and decays towards 0 with TailTime while
	// none is. While jobs are active a board draws IdleWatts plus their
	// prefill and decode power times RampFloor + (1 − RampFloor) × level,
	// so the first job after a long idle draws RampFloor of its power and
	// the board reaches its full power within about three RampTimes.
	// Default 0: no ramp, the jobs' power is drawn in full at once.
	RampTime time.Duration

	// RampFloor is the fraction of the jobs' power a board draws at level
	// 0; it must lie in [0, 1]. It is used only with RampTime.
	RampFloor float64

	// TailWatts is what a board draws above IdleWatts, times the level,
	// while no job is active: the power that lingers after the last job
	// ends while the clocks come down, with time constant TailTime.
	// Default 0: a board with no job draws IdleWatts. The tail is no
	// job's: it counts in [GPU.UnownedEnergyMJ].
	TailWatts float64
	TailTime  time.Duration

	// MaxWatts is copied to each [source.Device]'s MaxWatts, the bound
	// above which a consumer treats a reading as a glitch. Zero leaves the
	// consumer's default. A workload whose instant power (token bursts
	// included) exceeds the bound will see its energy treated as glitches.
	MaxWatts float64

	// Seed seeds every random draw: phases, jitter, gains, prefill factors
	// and noise. Default 0, itself a valid seed.
	Seed uint64

	// Now is the clock. Default time.Now. Tests pass a fake clock shared
	// with whatever reads the GPU. See the package doc's Time section for
	// a clock that goes backwards.
	Now func() time.Time
}

// Idealized returns c changed into the old simulator's model, in which
// energy is exactly idle power × time plus a fixed cost per token:
//
//   - no prefill phase (NoPrefill), so a job costs only its tokens and its
//     share of idle power;
//   - IdleWatts [IdealizedIdleWatts], JoulesPerToken
//     [IdealizedJoulesPerToken] and JoulesPerInputToken = JoulesPerToken ×
//     [IdealizedInputTokenRatio], each only where c leaves it zero;
//   - the steps aligned with creation (Phase = UpdatePeriod, defaulted
//     first), no jitter, no lag, gain exactly 1;
//   - TokensAtRead, so that a read that sees a step sees every token
//     produced before it;
//   - decode as energy per token ([DecodePerToken]), a counter that
//     integrates everything, and no power state (no ramp, no tail).
//
// Noise, Devices, the counter's range and the clock are kept. Call it on
// a Config that already holds the UpdatePeriod wanted: changing
// UpdatePeriod afterwards leaves Phase at the old period, which is no
// longer aligned unless the new period divides it.
func Idealized(c Config) Config {
	if c.UpdatePeriod == 0 {
		c.UpdatePeriod = DefaultUpdatePeriod
	}
	if c.IdleWatts == 0 {
		c.IdleWatts = IdealizedIdleWatts
	}
	if c.JoulesPerToken == 0 {
		c.JoulesPerToken = IdealizedJoulesPerToken
	}
	if c.JoulesPerInputToken == 0 {
		c.JoulesPerInputToken = c.JoulesPerToken * IdealizedInputTokenRatio
	}
	c.NoPrefill = true
	c.Phase = c.UpdatePeriod
	c.UpdateJitter = 0
	c.ReportLag = 0
	c.Gain = 1
	c.GainSpread = 0
	c.TokensAtRead = true
	c.Decode = DecodePerToken
	c.CounterWindow = 0
	c.RampTime, c.TailWatts = 0, 0
	return c
}

// resolve fills the defaults into c and validates the result.
func (c Config) resolve() (Config, error) {
	if c.Devices == 0 {
		c.Devices = DefaultDevices
	}
	if c.IdleWatts == 0 {
		c.IdleWatts = DefaultIdleWatts
	}
	if c.JoulesPerToken == 0 {
		c.JoulesPerToken = DefaultJoulesPerToken
		if c.Decode == DecodeBatch {
			c.JoulesPerToken = DefaultBatchJoulesPerToken
		}
	}
	if c.DecodeCurve == nil {
		c.DecodeCurve = DefaultDecodeCurve
	}
	if c.DecodeStep == 0 {
		c.DecodeStep = DefaultDecodeStep
	}
	if c.PrefillWatts == 0 {
		c.PrefillWatts = DefaultPrefillWatts
	}
	if c.PrefillBase == 0 {
		c.PrefillBase = DefaultPrefillBase
	}
	if c.PrefillPerInputToken == 0 {
		c.PrefillPerInputToken = DefaultPrefillPerInputToken
	}
	switch {
	case c.PrefillSpread == 0:
		c.PrefillSpread = DefaultPrefillSpread
	case c.PrefillSpread < 0:
		c.PrefillSpread = 0
	}
	switch {
	case c.PrefillPowerSpread == 0:
		c.PrefillPowerSpread = DefaultPrefillPowerSpread
	case c.PrefillPowerSpread < 0:
		c.PrefillPowerSpread = 0
	}
	if c.UpdatePeriod == 0 {
		c.UpdatePeriod = DefaultUpdatePeriod
	}
	if c.Gain == 0 {
		c.Gain = 1
	}
	if c.InitialCounter == 0 {
		c.InitialCounter = DefaultInitialCounter
	}
	if c.Now == nil {
		c.Now = time.Now
	}

	for _, f := range []struct {
		name  string
		v     float64
		below float64 // exclusive upper bound; 0 for none
	}{
		{"IdleWatts", c.IdleWatts, 0},
		{"JoulesPerToken", c.JoulesPerToken, 0},
		{"JoulesPerInputToken", c.JoulesPerInputToken, 0},
		{"PrefillWatts", c.PrefillWatts, 0},
		{"PrefillSpread", c.PrefillSpread, 1},
		{"PrefillPowerSpread", c.PrefillPowerSpread, 1},
		{"Gain", c.Gain, 0},
		{"GainSpread", c.GainSpread, 1},
		{"Noise", c.Noise, 1},
		{"MaxWatts", c.MaxWatts, 0},
		{"TailWatts", c.TailWatts, 0},
	} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) || (f.below != 0 && f.v >= f.below) {
			return c, fmt.Errorf("%w: %s = %v", ErrInvalidConfig, f.name, f.v)
		}
	}
	switch {
	case c.Devices < 0 || c.Devices > MaxDevices:
		return c, fmt.Errorf("%w: Devices = %d, want 1..%d", ErrInvalidConfig, c.Devices, MaxDevices)
	case c.PrefillBase < 0 || c.PrefillPerInputToken < 0 || c.PrefillPerSquaredKTokens < 0:
		return c, fmt.Errorf("%w: negative prefill length %v + %v/token + %v/(k tokens)²", ErrInvalidConfig,
			c.PrefillBase, c.PrefillPerInputToken, c.PrefillPerSquaredKTokens)
	case c.UpdatePeriod < MinUpdatePeriod || c.UpdatePeriod > MaxUpdatePeriod:
		return c, fmt.Errorf("%w: UpdatePeriod = %v, want %v..%v", ErrInvalidConfig, c.UpdatePeriod, MinUpdatePeriod, MaxUpdatePeriod)
	case c.Phase < 0:
		return c, fmt.Errorf("%w: Phase = %v", ErrInvalidConfig, c.Phase)
	case c.UpdateJitter < 0 || 2*c.UpdateJitter >= c.UpdatePeriod:
		return c, fmt.Errorf("%w: UpdateJitter = %v, want [0, UpdatePeriod/2)", ErrInvalidConfig, c.UpdateJitter)
	case c.ReportLag < 0 || c.ReportLag > MaxReportLag:
		return c, fmt.Errorf("%w: ReportLag = %v, want 0..%v", ErrInvalidConfig, c.ReportLag, MaxReportLag)
	case c.Decode != DecodeBatch && c.Decode != DecodePerToken:
		return c, fmt.Errorf("%w: Decode = %d", ErrInvalidConfig, c.Decode)
	case c.PrefillShare != ShareByTokenRate && c.PrefillShare != ShareByPowerFactor:
		return c, fmt.Errorf("%w: PrefillShare = %d", ErrInvalidConfig, c.PrefillShare)
	case c.RampTime < 0 || c.TailTime < 0:
		return c, fmt.Errorf("%w: RampTime = %v, TailTime = %v", ErrInvalidConfig, c.RampTime, c.TailTime)
	case !(c.RampFloor >= 0 && c.RampFloor <= 1):
		return c, fmt.Errorf("%w: RampFloor = %v, want [0, 1]", ErrInvalidConfig, c.RampFloor)
	case c.DecodeStep < 0:
		return c, fmt.Errorf("%w: DecodeStep = %v", ErrInvalidConfig, c.DecodeStep)
	case c.CounterWindow < 0 || c.CounterWindow > c.UpdatePeriod:
		return c, fmt.Errorf("%w: CounterWindow = %v, want 0..UpdatePeriod", ErrInvalidConfig, c.CounterWindow)
	case c.CounterMax != 0 && c.InitialCounter > c.CounterMax:
		return c, fmt.Errorf("%w: InitialCounter %d above CounterMax %d", ErrInvalidConfig, c.InitialCounter, c.CounterMax)
	}
	for i, p := range c.DecodeCurve {
		if p.Batch < 1 || p.Watts < 0 || math.IsNaN(p.Watts) || math.IsInf(p.Watts, 0) || (i > 0 && p.Batch <= c.DecodeCurve[i-1].Batch) {
			return c, fmt.Errorf("%w: DecodeCurve[%d] = %+v", ErrInvalidConfig, i, p)
		}
	}
	c.DecodeCurve = slices.Clone(c.DecodeCurve)
	return c, nil
}

// decodeWatts returns the decode power above idle per board with n jobs
// decoding, from curve.
func decodeWatts(curve []BatchPower, n int) float64 {
	if n <= 0 || len(curve) == 0 {
		return 0
	}
	if n <= curve[0].Batch {
		return curve[0].Watts * float64(n) / float64(curve[0].Batch)
	}
	for i := 1; i < len(curve); i++ {
		if n <= curve[i].Batch {
			p, q := curve[i-1], curve[i]
			f := math.Log2(float64(n)/float64(p.Batch)) / math.Log2(float64(q.Batch)/float64(p.Batch))
			return p.Watts + f*(q.Watts-p.Watts)
		}
	}
	return curve[len(curve)-1].Watts
}
