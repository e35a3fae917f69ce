package otelenergy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// SimulatedConfig configures a [SimulatedSource]. The zero value is a usable
// one-GPU simulation.
type SimulatedConfig struct {
	// Devices is the number of simulated GPUs. Default 1.
	Devices int
	// IdleWatts is each GPU's power with no work. Default 60 W.
	IdleWatts float64
	// JoulesPerToken is the energy one output token costs, split evenly
	// across the GPUs (as under tensor parallelism). Default 0.3 J.
	JoulesPerToken float64
	// JoulesPerInputToken is the energy one input (prefill) token costs,
	// split the same way. Default 0.03 J: a tenth of an output token, the
	// ledger's default weighting.
	JoulesPerInputToken float64
	// Noise is the relative amplitude of uniform noise on each counter
	// update, in [0, 1). Default 0: exactly the model above.
	Noise float64
	// Seed seeds the noise. The same seed gives the same series.
	Seed uint64
	// UpdatePeriod is how often the counter advances. A read between
	// updates returns the previous value, as NVML's counter does. Default
	// 100 ms.
	UpdatePeriod time.Duration
	// CounterMax is the largest counter value before it wraps to zero. Zero
	// means the full uint64 range.
	CounterMax uint64
	// InitialCounter is where every counter starts, as on a driver loaded a
	// while ago. Set it just below CounterMax to make the counters wrap
	// mid-run. Default 1,000,000 mJ.
	InitialCounter uint64
	// Now is the clock. Default time.Now. Tests share one fake clock
	// between the source and the monitor (see [WithClock]).
	Now func() time.Time
	// Tokens returns the cumulative output and input tokens the simulated
	// GPUs are charged for. Default: when the source is given to
	// [NewMonitor], the monitor's own token totals.
	Tokens func() (output, input uint64)
}

// SimulatedSource is a deterministic simulated GPU for demos and tests.
//
// Each GPU's counter advances at every UpdatePeriod boundary by its idle
// energy over the period plus the energy of the tokens produced since its
// previous update, and optionally noise. Faults can be injected: a counter
// reset (driver reload), read errors and a lost device; a wrap comes from
// starting the counters near [SimulatedConfig.CounterMax].
// [SimulatedSource.TrueEnergyMJ] reports the ground truth.
//
// All methods are safe for concurrent use.
type SimulatedSource struct {
	cfg SimulatedConfig

	mu       sync.Mutex
	devs     []Device
	state    []simDevice
	rng      *rand.Rand
	tokensFn func() (uint64, uint64)
	closed   bool
}

type simDevice struct {
	counter    uint64
	trueMJ     uint64
	frac       float64 // sub-millijoule energy carried to the next update
	lastUpdate time.Time
	outSeen    uint64
	inSeen     uint64
	failReads  int
	lost       bool
}

var _ Source = (*SimulatedSource)(nil)

// NewSimulatedSource returns a simulated source. It returns an error
// wrapping [ErrInvalidConfig] for negative or non-finite parameters.
func NewSimulatedSource(cfg SimulatedConfig) (*SimulatedSource, error) {
	if cfg.Devices == 0 {
		cfg.Devices = 1
	}
	if cfg.IdleWatts == 0 {
		cfg.IdleWatts = 60
	}
	if cfg.JoulesPerToken == 0 {
		cfg.JoulesPerToken = 0.3
	}
	if cfg.JoulesPerInputToken == 0 {
		cfg.JoulesPerInputToken = 0.03
	}
	if cfg.UpdatePeriod == 0 {
		cfg.UpdatePeriod = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.InitialCounter == 0 {
		cfg.InitialCounter = 1_000_000
	}
	for _, v := range []float64{cfg.IdleWatts, cfg.JoulesPerToken, cfg.JoulesPerInputToken, cfg.Noise} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: simulated GPU parameters must be finite and non-negative", ErrInvalidConfig)
		}
	}
	if cfg.Devices < 0 || cfg.Devices > 1024 || cfg.UpdatePeriod < 0 || cfg.Noise >= 1 ||
		(cfg.CounterMax != 0 && cfg.InitialCounter > cfg.CounterMax) {
		return nil, fmt.Errorf("%w: simulated GPU: devices %d, update period %v, noise %v", ErrInvalidConfig, cfg.Devices, cfg.UpdatePeriod, cfg.Noise)
	}
	s := &SimulatedSource{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.Seed, 0x6f74656c)),
		tokensFn: cfg.Tokens,
	}
	now := cfg.Now()
	for i := range cfg.Devices {
		s.devs = append(s.devs, Device{
			ID:         fmt.Sprintf("GPU-5151a7ed-0000-4000-8000-%012d", i),
			Name:       "Simulated GPU",
			Vendor:     "otelenergy",
			Index:      i,
			CounterMax: cfg.CounterMax,
		})
		// Counters start where a driver loaded a while ago would be.
		s.state = append(s.state, simDevice{counter: cfg.InitialCounter, lastUpdate: now})
	}
	return s, nil
}

// bindTokens supplies the token totals when the config left Tokens unset.
func (s *SimulatedSource) bindTokens(f func() (uint64, uint64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokensFn == nil {
		s.tokensFn = f
	}
}

// Kind returns "simulated".
func (s *SimulatedSource) Kind() string { return SourceSimulated }

// Devices returns the simulated GPUs.
func (s *SimulatedSource) Devices() []Device { return s.devs }

// UpdatePeriod returns how often the simulated counters advance.
func (s *SimulatedSource) UpdatePeriod() time.Duration { return s.cfg.UpdatePeriod }

func (s *SimulatedSource) max() uint64 {
	if s.cfg.CounterMax == 0 {
		return math.MaxUint64
	}
	return s.cfg.CounterMax
}

// advance applies every update boundary that has passed. s.mu is held.
func (s *SimulatedSource) advance(i int, now time.Time) {
	d := &s.state[i]
	periods := now.Sub(d.lastUpdate) / s.cfg.UpdatePeriod
	if periods <= 0 {
		return
	}
	dt := periods * s.cfg.UpdatePeriod
	var out, in uint64
	if s.tokensFn != nil {
		out, in = s.tokensFn()
	}
	n := float64(len(s.state))
	j := s.cfg.IdleWatts*dt.Seconds() +
		(s.cfg.JoulesPerToken*float64(out-d.outSeen)+s.cfg.JoulesPerInputToken*float64(in-d.inSeen))/n
	if s.cfg.Noise > 0 {
		j *= 1 + s.cfg.Noise*(2*s.rng.Float64()-1)
	}
	mj := j*1000 + d.frac
	inc := math.Floor(mj)
	d.frac = mj - inc
	delta := uint64(inc)
	d.trueMJ += delta
	if max := s.max(); d.counter > max-delta {
		d.counter = delta - (max - d.counter) - 1
	} else {
		d.counter += delta
	}
	d.lastUpdate = d.lastUpdate.Add(dt)
	d.outSeen, d.inSeen = out, in
}

// ReadEnergy returns device i's counter as of its last update.
func (s *SimulatedSource) ReadEnergy(i int) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return 0, fmt.Errorf("%w: simulated source closed", ErrUnavailable)
	case i < 0 || i >= len(s.state):
		return 0, fmt.Errorf("%w: device index %d out of range", ErrRead, i)
	case s.state[i].lost:
		return 0, fmt.Errorf("%w: simulated GPU %d", ErrDeviceLost, i)
	}
	s.advance(i, s.cfg.Now())
	if s.state[i].failReads > 0 {
		s.state[i].failReads--
		return 0, fmt.Errorf("%w: simulated GPU %d: injected read error", ErrRead, i)
	}
	return s.state[i].counter, nil
}

// Close marks the source closed. It is idempotent.
func (s *SimulatedSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// TrueEnergyMJ returns the energy device i has really consumed since the
// source was created, across every injected reset and wrap, as of the last
// counter update.
func (s *SimulatedSource) TrueEnergyMJ(i int) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(i, s.cfg.Now())
	return s.state[i].trueMJ
}

// InjectReset restarts device i's counter from zero, as a driver reload
// does. Energy consumed since the last update is still counted at the next.
func (s *SimulatedSource) InjectReset(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(i, s.cfg.Now())
	s.state[i].counter = 0
}

// InjectReadErrors makes device i's next n reads fail with [ErrRead].
func (s *SimulatedSource) InjectReadErrors(i, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state[i].failReads = n
}

// InjectLost makes device i fail every later read with [ErrDeviceLost].
func (s *SimulatedSource) InjectLost(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state[i].lost = true
}
