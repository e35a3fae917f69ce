package carbon

import (
	"fmt"
	"time"
)

// Reader gives the reading in force now. [*Poller] is one; [Static] is a
// static one.
type Reader interface {
	// Current returns the reading in force, or nil for none. It must not
	// block or allocate: the sampler calls it at every read.
	Current() *Reading
}

// Model is what the sampler needs to turn each split interval into
// emissions: where the intensity comes from, a timeline of it, the
// PUE, and embodied emissions per device-hour. It is the one object the
// Monitor holds; see docs/carbon.md, "How it works".
//
// Note and Interval must be called from one goroutine at a time (the
// sampler's); Estimate and Current are safe from any goroutine, take no
// lock and allocate nothing. A Model must not be copied after first use.
type Model struct {
	src      Reader
	tl       *timeline
	pue      PUE
	embodied Embodied

	cachedR  *Reading // Interval's factor cache: the sampler's only
	cachedF  Factor
	cachedOK bool
}

// ModelOption configures a [Model].
type ModelOption interface {
	apply(*modelConfig)
}

type modelOptionFunc func(*modelConfig)

func (f modelOptionFunc) apply(c *modelConfig) { f(c) }

type modelConfig struct {
	pue      PUE
	embodied Embodied
	capacity int // 0: defaultTimelineCapacity
}

// WithPUE sets the facility's PUE. The default is [PUENone], 1.
func WithPUE(p PUE) ModelOption { return modelOptionFunc(func(c *modelConfig) { c.pue = p }) }

// WithEmbodied sets the embodied emissions per device-hour. The default
// is none.
func WithEmbodied(e Embodied) ModelOption {
	return modelOptionFunc(func(c *modelConfig) { c.embodied = e })
}

// WithTimelineCapacity sets how many intensity changes the model keeps
// (at least 2). The default, 64, is more than five hours of changes at
// one every 5 minutes, far beyond the ledger's horizon.
func WithTimelineCapacity(n int) ModelOption {
	return modelOptionFunc(func(c *modelConfig) { c.capacity = n })
}

// NewModel returns a model that reads the intensity from src. It returns
// an error wrapping [ErrInvalidConfig] for a nil src, a [Static] out of
// range, a PUE outside [1, 100] or embodied emissions above 1 t per
// device-hour.
func NewModel(src Reader, opts ...ModelOption) (*Model, error) {
	c := modelConfig{pue: PUENone}
	for _, o := range opts {
		o.apply(&c)
	}
	if src == nil {
		return nil, fmt.Errorf("%w: no intensity reader", ErrInvalidConfig)
	}
	if c.pue < PUENone || c.pue > maxPUEPPM {
		return nil, fmt.Errorf("%w: PUE %s", ErrInvalidConfig, c.pue)
	}
	if s, ok := src.(Static); ok && s.r != nil && s.r.MgPerKWh > maxMgPerKWh {
		return nil, fmt.Errorf("%w: intensity %d mg/kWh", ErrInvalidConfig, s.r.MgPerKWh)
	}
	if uint64(c.embodied) > maxUGPerHour {
		return nil, fmt.Errorf("%w: embodied emissions %d µg per device-hour", ErrInvalidConfig, c.embodied)
	}
	return &Model{src: src, tl: newTimeline(c.capacity), pue: c.pue, embodied: c.embodied}, nil
}

// Current returns the reading in force now.
func (m *Model) Current() *Reading { return m.src.Current() }

// PUE returns the model's PUE.
func (m *Model) PUE() PUE { return m.pue }

// Reader returns the reader the model was built over, so that a caller
// can export what it knows besides the reading, such as a [*Poller]'s
// ages and failures.
func (m *Model) Reader() Reader { return m.src }

// Note records the reading in force at t, the sampler's read instant on
// the ledger's clock. The sampler calls it at every read, before it
// pushes the read's steps: a lock, a comparison, no allocation.
func (m *Model) Note(t int64) { m.tl.Note(t, m.src.Current()) }

// IntervalResult is what [Model.Interval] returns besides the requests'
// figures.
type IntervalResult struct {
	// Reading is the intensity the interval was converted at; nil when
	// none was in force, or when the one in force was out of range (a
	// custom [Reader]'s figure above 10 kg/kWh): then operational
	// emissions are all zero.
	Reading *Reading
	// Known is false when the interval ended before the oldest change the
	// timeline keeps, or before the first: the reading is then the oldest
	// kept, and the figure approximate.
	Known bool
	// OperationalRest and EmbodiedRest are the µg that went to no request.
	OperationalRest, EmbodiedRest uint64
}

// Interval converts one device's interval (a, b], as the ledger split it,
// into each request's operational and embodied µg. sharesMJ and restMJ
// are the requests' mJ and the rest, as for [Factor.Operational]; coverNS
// is each request's share of the interval's time in ns (nil: embodied
// emissions all go to the rest), the remainder of b − a being idle. It
// writes into op and emb, each at least as long as sharesMJ. The
// intensity is the one in force at b.
//
// It is exact in the sense of [Factor.Operational] and [Embodied.Split],
// and allocates nothing. Every element of op[:len(sharesMJ)] and
// emb[:len(sharesMJ)] is written, so they may be reused between calls.
//
// Interval panics if op or emb is shorter than sharesMJ, or if coverNS is
// not nil and not as long as sharesMJ: the slices are the caller's
// bookkeeping, not input, and a mismatch would give one request another's
// figure.
func (m *Model) Interval(a, b int64, sharesMJ []uint64, restMJ uint64, coverNS []uint64, op, emb []uint64) IntervalResult {
	if coverNS != nil && len(coverNS) != len(sharesMJ) {
		panic(fmt.Sprintf("carbon: Model.Interval: %d covers for %d shares", len(coverNS), len(sharesMJ)))
	}
	op, emb = op[:len(sharesMJ)], emb[:len(sharesMJ)]
	r, known := m.tl.At(b)
	f, ok := m.factor(r)
	if !ok {
		// A reading this package cannot convert (a custom Reader's figure
		// out of range) counts as none, and says so.
		r, known = nil, false
	}
	res := IntervalResult{Reading: r, Known: known}
	res.OperationalRest = f.Operational(sharesMJ, restMJ, op)
	var dt uint64
	if b > a {
		dt = uint64(b - a)
	}
	if coverNS == nil || m.embodied == 0 {
		clear(emb)
		res.EmbodiedRest = m.embodied.Of(time.Duration(dt))
		return res
	}
	var covered uint64
	for _, c := range coverNS {
		covered += c
	}
	res.EmbodiedRest = m.embodied.Split(coverNS, dt-min(covered, dt), emb)
	return res
}

// Estimate returns the operational µg of mJ at the reading in force now,
// for a request's figure before its intervals are split; false when no
// reading is in force.
func (m *Model) Estimate(mJ uint64) (uint64, bool) {
	r := m.src.Current()
	if r == nil {
		return 0, false
	}
	f, err := NewFactor(r.MgPerKWh, m.pue)
	if err != nil {
		return 0, false
	}
	return f.Of(mJ), true
}

// factor returns r's factor at the model's PUE, cached for the last
// reading: readings change every few minutes, intervals every 100 ms.
// Only Interval calls it.
// It is false, with a zero Factor, for no reading or one out of range.
func (m *Model) factor(r *Reading) (Factor, bool) {
	if r == nil {
		return Factor{}, false
	}
	if r != m.cachedR {
		f, err := NewFactor(r.MgPerKWh, m.pue)
		m.cachedR, m.cachedF, m.cachedOK = r, f, err == nil
	}
	return m.cachedF, m.cachedOK
}
