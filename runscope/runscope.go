package runscope

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
)

// Attribute keys that identify a run.
const (
	// RunIDKey is the run's unique id.
	RunIDKey = attribute.Key("otelenergy.run.id")
	// ModelKey is the model the run serves. It is the GenAI semantic
	// convention's request model key, defined here because the Go semconv
	// packages that carry it predate the hw.* keys this module also needs.
	ModelKey = attribute.Key("gen_ai.request.model")
)

// Snapshot is a set of cumulative totals at one instant. EnergyMJ is indexed
// like the monitor's devices.
type Snapshot struct {
	// T is when the snapshot was taken, in nanoseconds on the monitor's
	// monotonic clock.
	T              int64
	EnergyMJ       []uint64
	OutputTokens   uint64
	InputTokens    uint64
	UnattributedMJ uint64
}

// TotalEnergyMJ returns the sum of EnergyMJ.
func (s Snapshot) TotalEnergyMJ() uint64 {
	var t uint64
	for _, e := range s.EnergyMJ {
		t += e
	}
	return t
}

// Sub returns s − base field by field, saturating at zero, with s's time. A
// device missing from base counts from zero.
func (s Snapshot) Sub(base Snapshot) Snapshot {
	out := Snapshot{
		T:              s.T,
		EnergyMJ:       make([]uint64, len(s.EnergyMJ)),
		OutputTokens:   satSub(s.OutputTokens, base.OutputTokens),
		InputTokens:    satSub(s.InputTokens, base.InputTokens),
		UnattributedMJ: satSub(s.UnattributedMJ, base.UnattributedMJ),
	}
	for i, e := range s.EnergyMJ {
		var b uint64
		if i < len(base.EnergyMJ) {
			b = base.EnergyMJ[i]
		}
		out.EnergyMJ[i] = satSub(e, b)
	}
	return out
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// Run is one run: an id, a model, a start, and the baseline it subtracts.
// A Run is immutable except for its end, which [Scope.Begin] sets once.
type Run struct {
	id    string
	model string
	start time.Time
	base  Snapshot
	attrs []attribute.KeyValue

	endOnce sync.Once
	end     atomic.Pointer[Snapshot]
}

// NewRun returns a run with a fresh id that subtracts base. Most programs
// begin runs through [Scope.Begin] (or the monitor's BeginRun) instead.
func NewRun(model string, start time.Time, base Snapshot) *Run {
	id := NewID()
	return &Run{
		id:    id,
		model: model,
		start: start,
		base:  base,
		attrs: []attribute.KeyValue{RunIDKey.String(id), ModelKey.String(model)},
	}
}

// NewID returns a random 128-bit id in lower-case hex.
func NewID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails: crypto/rand panics rather than return an error
	return hex.EncodeToString(b[:])
}

// ID returns the run's unique id.
func (r *Run) ID() string { return r.id }

// Model returns the model name the run was begun with.
func (r *Run) Model() string { return r.model }

// Start returns when the run began, by the wall clock.
func (r *Run) Start() time.Time { return r.start }

// Baseline returns the snapshot the run subtracts.
func (r *Run) Baseline() Snapshot { return r.base }

// Attributes returns otelenergy.run.id and gen_ai.request.model. The caller
// must not modify the returned slice.
func (r *Run) Attributes() []attribute.KeyValue { return r.attrs }

// Resource returns a schemaless resource carrying the run's attributes, to
// merge into the resource of a MeterProvider built for this run.
func (r *Run) Resource() *resource.Resource {
	return resource.NewSchemaless(r.attrs...)
}

// End returns the run's end snapshot, or false while the run is current.
func (r *Run) End() (Snapshot, bool) {
	if s := r.end.Load(); s != nil {
		return *s, true
	}
	return Snapshot{}, false
}

// Since returns the run's own view of cumulative: cumulative − baseline. For
// an ended run, totals are capped at its end snapshot, so its view stops
// moving once the next run begins.
func (r *Run) Since(cumulative Snapshot) Snapshot {
	if end, ok := r.End(); ok {
		cumulative = end
	}
	return cumulative.Sub(r.base)
}

// Scope holds the current run. The zero value has no current run and is
// ready to use. A Scope must not be copied after first use.
type Scope struct {
	mu  sync.Mutex // serializes Begin
	cur atomic.Pointer[Run]
}

// Current returns the current run, or nil before the first Begin.
func (s *Scope) Current() *Run { return s.cur.Load() }

// Begin ends the current run at snapshot now, and begins and returns a new
// run for model whose baseline is now. It also returns the run it ended, or
// nil. The caller passes the same snapshot for both so that no total is
// counted in two runs or in neither.
func (s *Scope) Begin(model string, start time.Time, now Snapshot) (next, prev *Run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next = NewRun(model, start, now)
	// End the old run before publishing the new one, so a reader of the old
	// run never sees its live totals after a reader of the new one.
	prev = s.cur.Load()
	if prev != nil {
		prev.endOnce.Do(func() { prev.end.Store(&now) })
	}
	s.cur.Store(next)
	return next, prev
}
