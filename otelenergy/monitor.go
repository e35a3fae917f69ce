package otelenergy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/otelenergy/otelenergy/ring"
	"github.com/otelenergy/otelenergy/runscope"
	"github.com/otelenergy/otelenergy/tracker"
)

// MaxTokensPerCall is the largest count one AddTokens call accepts. Larger
// or negative counts are rejected and counted, never wrapped into a huge
// number.
const MaxTokensPerCall = 1 << 24

// Monitor meters the energy of one [Source]'s devices and attributes it to
// tokens and requests.
//
// One background goroutine, started by [Monitor.Start], samples every device
// at the configured cadence into a lock-free ring. Instruments are
// registered with the MeterProvider at construction and observe the sampled
// totals. Requests are tracked by [Monitor.StartRequest], which the HTTP
// middleware and gRPC interceptors call.
//
// All methods are safe for concurrent use. A Monitor owns its Source and
// closes it on Shutdown.
type Monitor struct {
	cfg   config
	src   Source
	devs  []*device
	ring  *ring.Ring
	epoch time.Time

	outTokens atomic.Uint64
	inTokens  atomic.Uint64
	rejected  atomic.Uint64
	// unattributed is window-share mode's idle energy; the ledger keeps
	// its own.
	unattributed atomic.Uint64
	// shut is set by Shutdown; Sample does nothing afterwards.
	shut atomic.Bool

	// sampleMu makes Sample the ring's single writer, whether it is called
	// by the sampler goroutine, BeginRun or the application.
	sampleMu   sync.Mutex
	lastSample atomic.Int64 // ns since epoch; -1 before the first sample

	scope runscope.Scope
	run   atomic.Pointer[runInfo]

	ledger  *ledger
	pending pendingSpans
	inst    *instruments

	life    sync.Mutex
	started bool
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

// device is the sampler's state for one device.
type device struct {
	Device
	acc    *tracker.Accumulator
	errors atomic.Uint64
	lost   atomic.Bool
	failed bool          // sampler-only: the previous read failed, so the next error is not reported again
	power  atomic.Uint64 // math.Float64bits of watts over the live window; NaN when unknown
	hist   []ring.Point  // sampler-only: recent (t, cumulative mJ) for power
	histN  int
}

// runInfo is a run plus everything the request path needs from it, built
// once per run.
type runInfo struct {
	run       *runscope.Run
	spanAttr  attribute.KeyValue
	recordOpt metric.RecordOption
	jptOpt    metric.ObserveOption
}

// NewMonitor returns a Monitor over src, with instruments registered on the
// configured MeterProvider. It does not start sampling: call
// [Monitor.Start]. It fails with [ErrInvalidConfig] for bad options, and
// with [ErrNoDevices] when src has no device.
func NewMonitor(src Source, opts ...Option) (*Monitor, error) {
	if src == nil {
		return nil, fmt.Errorf("%w: nil Source", ErrInvalidConfig)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	r, err := ring.New(cfg.ringCapacity)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	devices := src.Devices()
	if len(devices) == 0 {
		return nil, fmt.Errorf("%w: source %q has no devices", ErrNoDevices, src.Kind())
	}
	m := &Monitor{cfg: cfg, src: src, ring: r, epoch: cfg.now()}
	m.lastSample.Store(-1)
	histLen := int(cfg.liveWindow/cfg.interval) + 2
	for _, d := range devices {
		dev := &device{Device: d, acc: tracker.NewAccumulator(d.CounterMax), hist: make([]ring.Point, histLen)}
		dev.power.Store(math.Float64bits(math.NaN()))
		m.devs = append(m.devs, dev)
	}
	if sim, ok := src.(interface{ bindTokens(func() (uint64, uint64)) }); ok {
		sim.bindTokens(func() (uint64, uint64) { return m.outTokens.Load(), m.inTokens.Load() })
	}
	if cfg.attribution == AttributionLedger {
		m.ledger = newLedger(cfg)
	}
	if m.inst, err = newInstruments(m); err != nil {
		return nil, err
	}
	first, _ := m.scope.Begin(cfg.model, cfg.now(), m.snapshot(-1))
	m.setRun(first)
	return m, nil
}

// Resource returns a schemaless resource with otelenergy.source, the kind of
// the Monitor's source, to merge into the application's resource.
func (m *Monitor) Resource() *resource.Resource {
	return resource.NewSchemaless(SourceKey.String(m.src.Kind()))
}

// Devices returns the metered devices.
func (m *Monitor) Devices() []Device {
	out := make([]Device, len(m.devs))
	for i, d := range m.devs {
		out[i] = d.Device
	}
	return out
}

// Ring returns the Monitor's sample ring, for read-only queries.
func (m *Monitor) Ring() *ring.Ring { return m.ring }

// now returns nanoseconds since the Monitor was built, on the monotonic
// clock when the configured clock provides one.
func (m *Monitor) now() int64 { return int64(m.cfg.now().Sub(m.epoch)) }

// Start takes a first sample and starts the sampler goroutine. It is
// idempotent; after Shutdown it returns [ErrClosed].
func (m *Monitor) Start() error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.started {
		return nil
	}
	m.started = true
	m.stop, m.done = make(chan struct{}), make(chan struct{})
	m.Sample()
	go m.loop(m.stop, m.done)
	return nil
}

func (m *Monitor) loop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(m.cfg.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			m.Sample()
		}
	}
}

// Shutdown stops the sampler, waits for it to exit, takes a last sample so
// that requests that ended since the previous one get their final figures,
// unregisters the instruments and closes the source. It is idempotent.
//
// If ctx ends before the sampler exits (a device read that hangs), Shutdown
// returns ctx's error at once; the source is then closed when the sampler's
// read returns, and requests still being tracked keep the figures they have,
// marked approximate.
func (m *Monitor) Shutdown(ctx context.Context) error {
	m.life.Lock()
	if m.closed {
		m.life.Unlock()
		return nil
	}
	m.closed = true
	started, stop, done := m.started, m.stop, m.done
	m.life.Unlock()

	var errs []error
	exited := true
	if started {
		close(stop)
		select {
		case <-done:
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
			exited = false
		}
	}
	if exited && m.lastSample.Load() >= 0 {
		m.Sample()
	}
	// shut is set without sampleMu: a sample stuck in a device read must
	// not hold Shutdown past its context.
	m.shut.Store(true)
	if m.ledger != nil {
		m.recordFinal(m.ledger.flush())
	}
	m.pending.flush()
	if err := m.inst.unregister(); err != nil {
		errs = append(errs, err)
	}
	if !exited {
		go func() {
			<-done
			if err := m.src.Close(); err != nil {
				otel.Handle(err)
			}
		}()
		return errors.Join(errs...)
	}
	if err := m.src.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Sample reads every device once and records a point. The sampler goroutine
// calls it at every tick; applications that drive sampling themselves call
// it instead of Start. Sample serializes with itself, and does nothing after
// Shutdown. Steady-state sampling allocates nothing.
func (m *Monitor) Sample() {
	m.sampleMu.Lock()
	defer m.sampleMu.Unlock()
	if !m.shut.Load() {
		m.sampleLocked()
	}
}

func (m *Monitor) sampleLocked() {
	t := m.now()
	if last := m.lastSample.Load(); last >= 0 && t < last {
		t = last // a clock that went backwards must not break the ring's order
	}
	var total uint64
	for i, d := range m.devs {
		if !d.lost.Load() {
			m.read(i, d, t)
		}
		total += d.acc.Total()
	}
	tokens := m.outTokens.Load()
	if err := m.ring.Push(ring.Point{T: t, EnergyMJ: total, Tokens: tokens}); err != nil {
		otel.Handle(err) // unreachable: t never goes backwards
	}
	if m.ledger != nil {
		m.recordFinal(m.ledger.step(t, total, tokens, m.inTokens.Load()))
	} else if p, ok := m.ring.Back(1); ok && p.Tokens == tokens {
		// Window-share: energy in an interval that saw no tokens is idle.
		m.unattributed.Add(satSub(total, p.EnergyMJ))
	}
	m.lastSample.Store(t)
	m.pending.wake(t - int64(pendingHorizon))
}

// read samples device i. Errors are counted; the first of a run of failures
// is reported through otel.Handle, because the sampler has no caller.
func (m *Monitor) read(i int, d *device, t int64) {
	raw, err := m.src.ReadEnergy(i)
	if err == nil {
		_, err = d.acc.Advance(raw)
	}
	if err != nil {
		d.errors.Add(1)
		if errors.Is(err, ErrDeviceLost) {
			d.lost.Store(true)
			d.power.Store(math.Float64bits(math.NaN()))
		}
		if !d.failed {
			otel.Handle(fmt.Errorf("otelenergy: reading %s (%s): %w", d.ID, d.Name, err))
		}
		d.failed = true
		return
	}
	d.failed = false
	d.recordPower(t, d.acc.Total())
}

// recordPower appends (t, mJ) to the device's history and publishes its mean
// power over the live window.
func (d *device) recordPower(t int64, mj uint64) {
	n := len(d.hist)
	d.hist[d.histN%n] = ring.Point{T: t, EnergyMJ: mj}
	d.histN++
	if d.histN < 2 {
		return
	}
	oldest := d.hist[max(0, d.histN-n)%n]
	w := ring.Window{Start: oldest, End: d.hist[(d.histN-1)%n]}
	if watts, ok := w.Watts(); ok {
		d.power.Store(math.Float64bits(watts))
	}
}

// AddTokens counts n output tokens: in the Monitor's totals, and in the
// request carried by ctx if there is one. It is one atomic add per count
// and never allocates. A negative n, or one above [MaxTokensPerCall], is
// rejected and counted. On a nil Monitor it does nothing, so handlers can
// call it whether or not energy metering could start.
func (m *Monitor) AddTokens(ctx context.Context, n int) { m.addTokens(ctx, n, false) }

// AddInputTokens counts n input (prompt) tokens, kept apart from output
// tokens, as [Monitor.AddTokens] does.
func (m *Monitor) AddInputTokens(ctx context.Context, n int) { m.addTokens(ctx, n, true) }

func (m *Monitor) addTokens(ctx context.Context, n int, input bool) {
	if m == nil {
		return
	}
	if n <= 0 || n > MaxTokensPerCall {
		if n != 0 {
			m.rejected.Add(1)
		}
		return
	}
	total := &m.outTokens
	if input {
		total = &m.inTokens
	}
	total.Add(uint64(n))
	if r := requestFrom(ctx); r != nil && r.m == m {
		if input {
			r.in.Add(uint64(n))
		} else {
			r.out.Add(uint64(n))
		}
	}
}

// RejectedTokenReports returns how many AddTokens or AddInputTokens calls
// were rejected for a negative or absurd count.
func (m *Monitor) RejectedTokenReports() uint64 { return m.rejected.Load() }

// snapshot returns the cumulative totals. t is the snapshot's time; a
// negative t takes the last sample's.
func (m *Monitor) snapshot(t int64) runscope.Snapshot {
	if t < 0 {
		t = max(m.lastSample.Load(), 0)
	}
	s := runscope.Snapshot{
		T:            t,
		EnergyMJ:     make([]uint64, len(m.devs)),
		OutputTokens: m.outTokens.Load(),
		InputTokens:  m.inTokens.Load(),
	}
	for i, d := range m.devs {
		s.EnergyMJ[i] = d.acc.Total()
	}
	s.UnattributedMJ = m.unattributedMJ()
	return s
}

func (m *Monitor) unattributedMJ() uint64 {
	if m.ledger != nil {
		return m.ledger.unattributed.Load()
	}
	return m.unattributed.Load()
}

// Totals returns the process-cumulative totals as of now: energy per device
// as of the last sample, and tokens as of now.
func (m *Monitor) Totals() runscope.Snapshot { return m.snapshot(-1) }

// SamplerErrors returns the number of failed reads of device i.
func (m *Monitor) SamplerErrors(i int) uint64 { return m.devs[i].errors.Load() }

// Run returns the current run.
func (m *Monitor) Run() *runscope.Run { return m.run.Load().run }

// RunTotals returns the current run and its own view of the totals:
// cumulative − the run's baseline. This is the "this run" figure for an
// in-process dashboard; exported counters stay cumulative.
func (m *Monitor) RunTotals() (*runscope.Run, runscope.Snapshot) {
	ri := m.run.Load()
	return ri.run, ri.run.Since(m.snapshot(-1))
}

// BeginRun ends the current run and begins a new one for model, such as
// after a model load or hot-swap. It takes a sample first, so both runs'
// boundaries fall on the same sample: no energy is counted in both runs or
// in neither. It returns the new run; the ended one keeps its end snapshot.
func (m *Monitor) BeginRun(model string) *runscope.Run {
	m.sampleMu.Lock()
	defer m.sampleMu.Unlock()
	if !m.shut.Load() {
		m.sampleLocked()
	}
	next, _ := m.scope.Begin(model, m.cfg.now(), m.snapshot(m.lastSample.Load()))
	m.setRun(next)
	return next
}

func (m *Monitor) setRun(r *runscope.Run) {
	attrs := r.Attributes()
	m.run.Store(&runInfo{
		run:       r,
		spanAttr:  runscope.RunIDKey.String(r.ID()),
		recordOpt: metric.WithAttributeSet(attribute.NewSet(attrs...)),
		jptOpt:    metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{WindowKey.String("run")}, attrs...)...)),
	})
}
