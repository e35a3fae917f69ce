package simgpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/otelenergy/otelenergy/internal/source"
)

// SourceKind is what [GPU.Kind] returns.
const SourceKind = "simulated"

// floorSlackMJ is forgiven when a float energy is floored to whole
// millijoules, so that sums which are whole in exact arithmetic (60 W ×
// 200 ms + 5 × 0.3 J) do not lose a millijoule to float rounding.
const floorSlackMJ = 1e-6

// GPU is a set of simulated boards that run [Job]s and meter their energy
// the way NVML's counters do: a staircase that steps every UpdatePeriod at
// a per-board phase, with optional lag, jitter and gain. The package doc
// states the physics, the counter and the ground truth.
//
// A GPU implements [source.Source]. Create one with [New]; the zero value
// is not usable. All methods are safe for concurrent use; one mutex
// serializes them, and the clock is called with it held, so Config.Now
// must not call back into the GPU.
type GPU struct {
	cfg    Config // resolved
	start  time.Time
	period int64 // ns
	lag    int64 // ns
	jitter int64 // ns
	window int64 // ns; 0 for a counter that integrates everything
	// windowScale is UpdatePeriod / CounterWindow.
	windowScale float64
	devs        []source.Device

	mu       sync.Mutex
	cur      int64 // ns since start; the physics is integrated up to here
	boards   []board
	gainSum  float64 // Σ board gains
	active   []*Job  // jobs between Begin and End, in no order
	unowned  float64 // gained mJ of idle and tail energy while no job was active
	level    float64 // the boards' power state, in [0, 1]: see Config.RampTime
	rng      *rand.Rand
	closed   bool
	counterM uint64 // the counter's modulus minus one; 0 for the full uint64 range
}

// board is one board's physics and counter. Energies are gained mJ since
// the GPU's creation: cont holds idle and prefill energy, imp token energy.
type board struct {
	gain  float64
	phase int64 // ns in [0, period)
	cont  float64
	imp   float64
	// mcont and mimp are what a windowed counter integrates of cont and
	// imp, already scaled to the whole period; unused without a window.
	mcont float64
	mimp  float64

	// pending holds, in ascending k, the samples of the steps whose
	// sample instant has passed and that no later step has superseded:
	// at most one step with τ_k ≤ cur (the ready one, first) and those
	// still awaiting their τ_k. nextSample is the first k not sampled.
	pending    []sample
	nextSample int64

	// The published counter is wrap(base + floor(pubE) - sub): base is
	// InitialCounter until a reset sets it to 0, and sub the whole
	// millijoules already published at the latest reset.
	pubE float64
	base uint64
	sub  uint64

	failReads int
	lost      bool
	up, back  uint64 // one-shot offsets for the next successful read
}

// sample is the energy a step reports, taken at its sample instant.
type sample struct {
	k         int64
	cont, imp float64
}

var _ source.Source = (*GPU)(nil)

// New returns a GPU whose boards start now, by c.Now, with their counters
// at c.InitialCounter. It returns an error wrapping [ErrInvalidConfig] when
// a field is negative, non-finite or out of the range its doc gives.
func New(c Config) (*GPU, error) {
	c, err := c.resolve()
	if err != nil {
		return nil, err
	}
	g := &GPU{
		cfg:      c,
		start:    c.Now(),
		period:   int64(c.UpdatePeriod),
		lag:      int64(c.ReportLag),
		jitter:   int64(c.UpdateJitter),
		window:   int64(c.CounterWindow),
		rng:      rand.New(rand.NewPCG(c.Seed, 0x6a6f6273)),
		boards:   make([]board, c.Devices),
		devs:     make([]source.Device, c.Devices),
		counterM: c.CounterMax,
	}
	if g.window > 0 {
		g.windowScale = float64(g.period) / float64(g.window)
	}
	if g.counterM == math.MaxUint64 {
		g.counterM = 0
	}
	// Board draws come from their own stream, so that the number of
	// boards does not shift the jobs' draws and vice versa.
	brng := rand.New(rand.NewPCG(c.Seed, 0x626f61726473))
	for i := range g.boards {
		b := &g.boards[i]
		b.phase = int64(c.Phase) % g.period
		if c.Phase == 0 {
			b.phase = brng.Int64N(g.period)
		}
		b.gain = c.Gain * (1 + c.GainSpread*(2*brng.Float64()-1))
		b.base = c.InitialCounter
		g.gainSum += b.gain
		// Steps whose sample instant falls at or before creation report
		// no energy; steps at or before creation are never published.
		b.nextSample = g.lastStep(i, 0, g.lag) + 1
		for k := g.lastStep(i, 0, 0) + 1; k < b.nextSample; k++ {
			b.pending = append(b.pending, sample{k: k})
		}
		g.devs[i] = source.Device{
			ID:         fmt.Sprintf("GPU-5151a7ed-0000-4000-8000-%012d", i),
			Name:       "Simulated GPU",
			Vendor:     "otelenergy",
			Index:      i,
			CounterMax: c.CounterMax,
			Type:       "gpu",
			MaxWatts:   c.MaxWatts,
		}
	}
	return g, nil
}

// Config returns the configuration in use, with every default filled in.
func (g *GPU) Config() Config { return g.cfg }

// Start returns the instant the GPU was created, by its clock: time zero of
// its steps and the instant its counters read InitialCounter.
func (g *GPU) Start() time.Time { return g.start }

// UpdatePeriod returns the time between counter steps.
func (g *GPU) UpdatePeriod() time.Duration { return g.cfg.UpdatePeriod }

// Phase returns board i's phase, in [0, UpdatePeriod). It panics if i is
// out of range.
func (g *GPU) Phase(i int) time.Duration { return time.Duration(g.boards[i].phase) }

// Gain returns board i's gain. It panics if i is out of range.
func (g *GPU) Gain(i int) float64 { return g.boards[i].gain }

// StepInstant returns the instant of board i's step k:
// Start + Phase(i) + k × UpdatePeriod + the step's jitter. Only steps after
// Start are ever published. It panics if i is out of range.
func (g *GPU) StepInstant(i int, k int64) time.Time {
	return g.start.Add(time.Duration(g.stepAt(i, k, 0)))
}

// Kind returns [SourceKind].
func (g *GPU) Kind() string { return SourceKind }

// Devices returns a copy of the boards' descriptions, the same on every
// call.
func (g *GPU) Devices() []source.Device { return slices.Clone(g.devs) }

// ReadEnergy returns board i's published counter as of now, in mJ: the
// value of its latest step at or before now. Errors wrap
// [source.ErrUnavailable] after Close, [source.ErrRead] for an index out
// of range or an injected read error, and [source.ErrDeviceLost] after
// [GPU.InjectLost].
func (g *GPU) ReadEnergy(i int) (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return 0, fmt.Errorf("%w: simulated GPU closed", source.ErrUnavailable)
	case i < 0 || i >= len(g.boards):
		return 0, fmt.Errorf("%w: device index %d out of range", source.ErrRead, i)
	case g.boards[i].lost:
		return 0, fmt.Errorf("%w: simulated GPU %d", source.ErrDeviceLost, i)
	}
	g.advance()
	g.publish(i)
	b := &g.boards[i]
	if b.failReads > 0 {
		b.failReads--
		return 0, fmt.Errorf("%w: simulated GPU %d: injected read error", source.ErrRead, i)
	}
	v := g.wrapSub(g.wrapAdd(g.counter(i), b.up), b.back)
	b.up, b.back = 0, 0
	return v, nil
}

// Close marks the GPU closed: later reads fail with
// [source.ErrUnavailable]. Jobs and the ground truth keep working. Close is
// idempotent and always returns nil.
func (g *GPU) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return nil
}

// TrueEnergyMJ returns the whole millijoules board i has really consumed
// from creation to now, times its gain: what a counter with no staircase,
// no lag and no faults would read, less InitialCounter. It counts across
// every reset and wrap. It panics if i is out of range.
func (g *GPU) TrueEnergyMJ(i int) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.advance()
	b := &g.boards[i]
	return floorMJ(b.cont + b.imp)
}

// UnownedEnergyMJ returns the idle energy, times the gains, in mJ, that
// the boards consumed from creation to now while no job was active.
func (g *GPU) UnownedEnergyMJ() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.advance()
	return g.unowned
}

// ActiveJobs returns the number of jobs begun and not yet ended.
func (g *GPU) ActiveJobs() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.active)
}

// InjectReset restarts board i's counter from zero now, as a driver reload
// does. Energy consumed after the value published before the reset is not
// lost: the next step reports it above zero. It panics if i is out of
// range.
func (g *GPU) InjectReset(i int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.advance()
	g.publish(i)
	b := &g.boards[i]
	b.base, b.sub = 0, floorMJ(b.pubE)
}

// InjectReadErrors makes board i's next n reads fail with
// [source.ErrRead]. It panics if i is out of range.
func (g *GPU) InjectReadErrors(i, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.boards[i].failReads = n
}

// InjectLost makes every later read of board i fail with
// [source.ErrDeviceLost]. The board keeps consuming energy. It panics if i
// is out of range.
func (g *GPU) InjectLost(i int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.boards[i].lost = true
}

// InjectJitter makes board i's next successful read return its counter
// minus backMJ (modulo the counter's range), once: a reading that steps
// backwards by a little and then recovers. It panics if i is out of range.
func (g *GPU) InjectJitter(i int, backMJ uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.boards[i].back += backMJ
}

// InjectGlitch makes board i's next successful read return its counter
// plus upMJ (modulo the counter's range), once: a corrupt reading far
// ahead of the truth. It panics if i is out of range.
func (g *GPU) InjectGlitch(i int, upMJ uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.boards[i].up += upMJ
}

// advance integrates the physics from g.cur to now, splitting the span at
// every prefill end so that power is constant within each piece. g.mu is
// held.
func (g *GPU) advance() {
	t := g.cfg.Now().Sub(g.start).Nanoseconds()
	for g.cur < t {
		next := t
		for _, j := range g.active {
			if j.inPrefill && j.prefillEnd < next {
				next = j.prefillEnd
			}
		}
		g.integrate(next)
		for _, j := range g.active {
			if j.inPrefill && j.prefillEnd <= g.cur {
				j.inPrefill = false
			}
		}
	}
}

// integrate moves the physics from g.cur to t1, over which the jobs and
// their phases do not change, samples the steps whose sample instants fall
// in (g.cur, t1], and charges the span's energy to the boards, the active
// jobs or nobody. g.mu is held.
func (g *GPU) integrate(t1 int64) {
	t0 := g.cur
	dt := float64(t1 - t0)
	var k, pfSum, pfWeight, decWeight float64
	decoding := 0
	for _, j := range g.active {
		if j.inPrefill {
			k++
			pfSum += j.powerFactor
			pfWeight += j.prefillWeight()
		} else {
			decoding++
			decWeight += j.decodeWeight()
		}
	}
	// Concurrent prefills share a board sublinearly: k of them draw
	// √k × their mean power.
	pfWatts := 0.0 // per board
	if k > 0 {
		pfWatts = g.cfg.PrefillWatts * pfSum / math.Sqrt(k)
	}
	decWatts := 0.0
	if g.cfg.Decode == DecodeBatch {
		decWatts = decodeWatts(g.cfg.DecodeCurve, decoding)
	}
	p := g.newPiece(pfWatts+decWatts, len(g.active) > 0, g.level)
	for i := range g.boards {
		g.sampleSteps(i, t1, p)
		b := &g.boards[i]
		b.cont += b.gain * p.mj(t1-t0)
		if g.window > 0 {
			b.mcont += b.gain * g.windowedMJ(i, t0, t1, p) * g.windowScale
		}
	}
	g.level = p.levelAt(t1 - t0)
	idleMJ := g.gainSum * g.cfg.IdleWatts * dt / 1e6
	if len(g.active) == 0 {
		g.unowned += g.gainSum * p.mj(t1-t0) // idle, and the tail after the last job
		g.cur = t1
		return
	}
	idleMJ /= float64(len(g.active))
	// The jobs' work, at the power state's share of its full power.
	work := g.gainSum * p.workNS(t1-t0) / 1e6
	for _, j := range g.active {
		j.truth += idleMJ
		switch {
		case j.inPrefill && g.cfg.PrefillShare == ShareByPowerFactor:
			j.truth += work * pfWatts * j.powerFactor / pfSum
		case j.inPrefill:
			j.truth += work * pfWatts * j.prefillWeight() / pfWeight
		case decWatts > 0:
			j.truth += work * decWatts * j.decodeWeight() / decWeight
		}
	}
	g.cur = t1
}

// windowedMJ returns how much of the piece p's energy over (t0, t1] board
// i's counter integrates, before the gain and the window's scale: the
// parts that lie in the window [s_k - CounterWindow, s_k) before some
// step's sample instant s_k. p starts at t0. g.mu is held.
func (g *GPU) windowedMJ(i int, t0, t1 int64, p piece) float64 {
	var mj float64
	for k := g.lastStep(i, t0, g.lag); ; k++ {
		s := g.stepAt(i, k, g.lag)
		if s-g.window >= t1 {
			break
		}
		if lo, hi := max(t0, s-g.window), min(t1, s); hi > lo {
			mj += p.mj(hi-t0) - p.mj(lo-t0)
		}
	}
	return mj
}

// inWindow reports whether an impulse at t falls in one of board i's
// counter windows. g.mu is held.
func (g *GPU) inWindow(i int, t int64) bool {
	s := g.stepAt(i, g.lastStep(i, t, g.lag)+1, g.lag)
	return t >= s-g.window
}

// sampleSteps records board i's samples in (g.cur, t1], under the piece
// p that starts at g.cur, and drops the samples that the latest step at
// or before t1 supersedes. g.mu is held.
func (g *GPU) sampleSteps(i int, t1 int64, p piece) {
	b := &g.boards[i]
	kp := g.lastStep(i, t1, 0)
	drop := 0
	for drop < len(b.pending) && b.pending[drop].k < kp {
		drop++
	}
	b.pending = append(b.pending[:0], b.pending[drop:]...)
	// Steps before kp would be superseded at once, so sampling starts at
	// kp: a long span costs no more than the lag's worth of steps.
	k := max(b.nextSample, kp)
	for ; ; k++ {
		s := g.stepAt(i, k, g.lag)
		if s > t1 {
			break
		}
		smp := sample{k: k, cont: b.cont + b.gain*p.mj(s-g.cur), imp: b.imp}
		if g.window > 0 {
			smp.cont = b.mcont + b.gain*g.windowedMJ(i, g.cur, s, p)*g.windowScale
			smp.imp = b.mimp
		}
		b.pending = append(b.pending, smp)
	}
	b.nextSample = k
}

// publish makes board i's ready step, if any, its published value. With
// TokensAtRead the step reports the token energy as of now instead of as
// of its sample instant. g.mu is held and the physics advanced.
func (g *GPU) publish(i int) {
	b := &g.boards[i]
	if len(b.pending) == 0 || g.stepAt(i, b.pending[0].k, 0) > g.cur {
		return
	}
	s := b.pending[0]
	b.pending = append(b.pending[:0], b.pending[1:]...)
	if g.cfg.TokensAtRead {
		s.imp = b.imp
		if g.window > 0 {
			s.imp = b.mimp
		}
	}
	b.pubE = s.cont + s.imp
}

// counter returns board i's published counter. g.mu is held.
func (g *GPU) counter(i int) uint64 {
	b := &g.boards[i]
	return g.wrapAdd(b.base, floorMJ(b.pubE)-b.sub)
}

// stepAt returns, in ns since start, board i's step k less off.
func (g *GPU) stepAt(i int, k, off int64) int64 {
	return g.boards[i].phase + k*g.period + g.jitterOf(i, k) - off
}

// lastStep returns the largest k with stepAt(i, k, off) ≤ t. Jitter below
// half a period keeps the steps in order, so the nominal index is off by
// at most one.
func (g *GPU) lastStep(i int, t, off int64) int64 {
	x := t + off - g.boards[i].phase
	k := x / g.period
	if x%g.period < 0 {
		k--
	}
	for g.stepAt(i, k+1, off) <= t {
		k++
	}
	for g.stepAt(i, k, off) > t {
		k--
	}
	return k
}

// jitterOf returns step k's jitter on board i, uniform in [-J, J]. It is a
// hash of the seed, the board and k rather than a stream draw, so that a
// step's instant can be computed without drawing every step before it.
func (g *GPU) jitterOf(i int, k int64) int64 {
	if g.jitter == 0 {
		return 0
	}
	h := splitmix64(splitmix64(g.cfg.Seed^0x6a6974746572+uint64(i)) ^ uint64(k))
	return int64(h%uint64(2*g.jitter+1)) - g.jitter
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// wrapAdd returns v + d in the counter's range.
func (g *GPU) wrapAdd(v, d uint64) uint64 {
	m := g.counterM
	if m == 0 {
		return v + d
	}
	d %= m + 1
	if v > m-d {
		return d - (m - v) - 1
	}
	return v + d
}

// wrapSub returns v - d in the counter's range.
func (g *GPU) wrapSub(v, d uint64) uint64 {
	m := g.counterM
	if m == 0 {
		return v - d
	}
	d %= m + 1
	if v >= d {
		return v - d
	}
	return m - (d - v) + 1
}

// floorMJ floors a non-negative energy to whole millijoules.
func floorMJ(mj float64) uint64 {
	return uint64(math.Floor(mj + floorSlackMJ))
}
