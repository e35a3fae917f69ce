package otelenergy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/internal/cputime"
	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/ring"
	"github.com/otelenergy/otelenergy/tracker"
)

// defaultHostInterval is how often the host's counters and the CPU times
// are read: each read walks /proc once, so it is paced far slower than
// the accelerator's 17 ms, and a request's host figure becomes final up
// to this long after its end.
const defaultHostInterval = 250 * time.Millisecond

// The /proc walk runs on the sampler's goroutine, after the accelerator's
// reads, and takes about a millisecond per hundred processes: the host
// interval stretches to hostCostRatio times the walk's last duration, so
// that it takes at most a twentieth of the sampler's time, up to
// maxHostInterval.
const (
	hostCostRatio   = 20
	maxHostInterval = 2 * time.Second
)

// Host energy classes: the hw.type of a host device, and the request
// attribute its share goes to.
const (
	hostCPU = iota
	hostMemory
	hostClasses
)

// Span attributes of a request's host share, named after the devices'
// hw.type (see docs/metrics.md).
const (
	cpuMillijoulesKey    = attribute.Key("energy.cpu.millijoules")
	memoryMillijoulesKey = attribute.Key("energy.memory.millijoules")
)

var hostKeys = [hostClasses]attribute.Key{cpuMillijoulesKey, memoryMillijoulesKey}

// hostConfig is WithHostSource's part of a Monitor's config.
type hostConfig struct {
	src  Source
	pids []int
	// cpu reads the attributed tree's and the node's cumulative CPU time;
	// nil reads /proc. every is the cadence; zero is the default. Both
	// are set by tests.
	cpu   func() (tree, node uint64, err error)
	every time.Duration
}

// WithHostSource makes the Monitor meter src too, the host's CPU packages
// (hw.type cpu) and DRAM (hw.type memory), such as package energysource's
// Host opens, and give each request its share of them beside its
// accelerator energy, which stays energy.millijoules.
//
// Every 250 ms (longer on a node whose /proc takes long to walk, so that
// the walk takes at most a twentieth of the sampler's time, up to 2 s) the
// sampler reads src and the CPU time of the attributed processes (pids and
// their descendants; by default this process) and of the whole node, from
// /proc: the processes' share of each device's
// energy in that window is its energy times their CPU time over the
// node's, as Kepler splits it, and the rest is exported as
// otelenergy.energy.other_processes. The ledger splits the processes'
// share among the requests active in the window by time, as it splits
// static power: at every instant equally among the requests active then.
// A request then carries energy.cpu.millijoules and
// energy.memory.millijoules (see [Result] and docs/attribution.md), and
// otelenergy.request.energy gets its shares with hw.type cpu and memory.
// The request path pays nothing more but one larger allocation; the CPU
// times are read on the sampler's goroutine.
//
// Open src without processes of its own: the Monitor takes its whole
// energy and splits it itself. The pids are in the numbering of this
// process's /proc. A device whose type is not cpu or memory (RAPL's psys,
// a whole-platform figure), a nil src, or a pid below 1 make NewMonitor
// fail with [ErrInvalidConfig]. The Monitor closes src on Shutdown. The
// default meters no host.
func WithHostSource(src Source, pids ...int) Option {
	return optionFunc(func(c *config) {
		c.host = &hostConfig{src: src, pids: append([]int(nil), pids...)}
	})
}

// hostMeter is a Monitor's host source and its split.
type hostMeter struct {
	src   Source
	devs  []*hostDevice
	cpu   func() (tree, node uint64, err error)
	every int64 // the host interval, ns; stretched by the walk's cost when adapt
	base  int64
	adapt bool
	has   [hostClasses]bool
	reg   metric.Registration

	// Sampler-only.
	last    int64
	started bool
	cpuErr  bool // the previous CPU-time read failed

	typeOpts [hostClasses]metric.RecordOption
	devOpts  []metric.ObserveOption
}

// hostDevice is the sampler's state for one host device.
type hostDevice struct {
	Device
	class int
	acc   *tracker.Accumulator
	ring  *ring.Ring

	// Sampler-only: the reading and CPU times the last pushed point
	// covers up to, and the processes' share so far, window by window.
	primed      bool
	failed      bool
	lastT       int64
	pushedTotal uint64
	tree, node  uint64
	share       cputime.Share
	other       atomic.Uint64 // published: pushed energy not the processes'
}

// hostBalance holds a request's host shares by class, in mJ.
type hostBalance [hostClasses]atomic.Uint64

// hostRequestState is a request's state with its host balance, allocated
// together so that a request costs no more allocations with a host.
type hostRequestState struct {
	requestState
	bal hostBalance
}

func newHostMeter(m *Monitor, c *hostConfig) (*hostMeter, error) {
	if c.src == nil {
		return nil, fmt.Errorf("%w: WithHostSource: nil Source", ErrInvalidConfig)
	}
	devices := c.src.Devices()
	if len(devices) == 0 {
		return nil, fmt.Errorf("%w: WithHostSource: source %q has no devices", ErrNoDevices, c.src.Kind())
	}
	h := &hostMeter{src: c.src, cpu: c.cpu, every: int64(c.every)}
	if h.every <= 0 {
		h.every = int64(defaultHostInterval)
	}
	h.base = h.every
	for _, d := range devices {
		var class int
		switch d.HWType() {
		case "cpu":
			class = hostCPU
		case "memory":
			class = hostMemory
		default:
			return nil, fmt.Errorf("%w: WithHostSource: device %s (%s) has hw.type %q; a request's host share is split from cpu and memory devices only (psys is a whole-platform figure)",
				ErrInvalidConfig, d.ID, d.Name, d.HWType())
		}
		r, err := ring.New(ringCapacity)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		h.has[class] = true
		h.devs = append(h.devs, &hostDevice{
			Device: d,
			class:  class,
			acc:    tracker.NewAccumulator(tracker.Limits{CounterMax: d.CounterMax, MaxWatts: d.PowerBound(), MaxWattsFirm: d.MaxWattsFirm && d.MaxWatts > 0}),
			ring:   r,
		})
	}
	if h.cpu == nil {
		pids := c.pids
		if len(pids) == 0 {
			pids = []int{os.Getpid()}
		}
		meter := &cputime.Meter{Root: "/proc"}
		for _, p := range pids {
			if p < 1 {
				return nil, fmt.Errorf("%w: WithHostSource: pid %d", ErrInvalidConfig, p)
			}
			meter.Pids = append(meter.Pids, uint32(p))
		}
		h.cpu, h.adapt = meter.Times, true
	}
	for class, t := range []string{"cpu", "memory"} {
		h.typeOpts[class] = metric.WithAttributeSet(attribute.NewSet(semconv.HwTypeKey.String(t)))
	}
	return h, nil
}

// rings returns the host devices' rings, for the ledger's TimeRings.
func (h *hostMeter) rings() []*ring.Ring {
	out := make([]*ring.Ring, len(h.devs))
	for i, d := range h.devs {
		out[i] = d.ring
	}
	return out
}

// give is the ledger's TimeGive: it adds a share of host device i to a
// request's balance. Sampler side.
func (h *hostMeter) give(r *ledger.Account, i int, mj uint64) {
	if st, ok := r.Data.(*requestState); ok && st.host != nil {
		st.host[h.devs[i].class].Add(mj)
	}
}

// newRequestState allocates a request's state, with a host balance when
// the Monitor meters a host.
func (m *Monitor) newRequestState() *requestState {
	if m.host == nil {
		return &requestState{}
	}
	hs := &hostRequestState{}
	hs.requestState.host = &hs.bal
	return &hs.requestState
}

// sample reads the host's devices and the CPU times when a host interval
// has passed since the last read, at t on the Monitor's clock, and pushes
// each device's processes' share into its ring. It reports whether it
// pushed a point, so that the ledger settles. Sampler side.
//
// A device's point covers the window since its previous point, with the
// CPU times of the same window: when the CPU times or the device cannot
// be read, nothing is pushed, and the next good read covers the gap, so
// no energy is lost and every window's energy meets its own CPU share.
func (h *hostMeter) sample(m *Monitor, t int64) bool {
	if h.started && t-h.last < h.every {
		return false
	}
	h.started, h.last = true, t
	began := time.Now()
	tree, node, cpuErr := h.cpu()
	if h.adapt {
		h.every = min(max(h.base, hostCostRatio*int64(time.Since(began))), int64(maxHostInterval))
	}
	if cpuErr != nil && !h.cpuErr {
		otel.Handle(fmt.Errorf("otelenergy: reading CPU time for the host's share: %w", cpuErr))
	}
	h.cpuErr = cpuErr != nil
	pushed := false
	for i, d := range h.devs {
		raw, err := h.src.ReadEnergy(i)
		now := max(m.now(), t, d.lastT)
		if err == nil {
			_, err = d.acc.AdvanceRead(raw, d.lastT, now)
		}
		if err != nil {
			if !d.failed {
				otel.Handle(fmt.Errorf("otelenergy: reading host device %s (%s): %w", d.ID, d.Name, err))
			}
			d.failed = true
			continue
		}
		d.failed, d.lastT = false, now
		if cpuErr != nil {
			continue
		}
		total := d.acc.Total()
		if d.primed && node > d.node && tree > d.tree {
			d.share.Add(total-d.pushedTotal, tree-d.tree, node-d.node)
		}
		d.primed, d.pushedTotal, d.tree, d.node = true, total, tree, node
		if p, ok := d.ring.Back(0); ok && now < p.T {
			now = p.T
		}
		if err := d.ring.Push(ring.Point{T: now, EnergyMJ: d.share.MJ()}); err != nil {
			otel.Handle(err) // unreachable: now never goes backwards
			continue
		}
		d.other.Store(total - d.share.MJ())
		pushed = true
	}
	return pushed
}

// hostResult fills res's host shares for a request as known now: its
// balance when final, and otherwise its balance plus its share of what
// is not split yet, priced at each device's last split rate.
func (m *Monitor) hostResult(res *Result, st *requestState, final bool, end int64) {
	h := m.host
	if h == nil || st.host == nil {
		return
	}
	var est [hostClasses]float64
	if !final {
		for i, d := range h.devs {
			through, rate, ok := m.ledger.TimeThrough(i)
			if !ok {
				continue
			}
			if from := max(through, st.Start()); end > from {
				est[d.class] += float64(end-from) * rate
			}
		}
	}
	res.CPUMJ = st.host[hostCPU].Load() + uint64(est[hostCPU])
	res.MemoryMJ = st.host[hostMemory].Load() + uint64(est[hostMemory])
	res.HasCPU, res.HasMemory = h.has[hostCPU], h.has[hostMemory]
}

// hostAttrs writes res's host span attributes into kv and returns how
// many it wrote (at most hostClasses).
func hostAttrs(kv []attribute.KeyValue, res Result) int {
	n := 0
	if res.HasCPU {
		kv[n] = cpuMillijoulesKey.Int64(int64(min(res.CPUMJ, math.MaxInt64)))
		n++
	}
	if res.HasMemory {
		kv[n] = memoryMillijoulesKey.Int64(int64(min(res.MemoryMJ, math.MaxInt64)))
		n++
	}
	return n
}

// isHostKey reports whether k is one of the host share attributes.
func isHostKey(k attribute.Key) bool { return k == cpuMillijoulesKey || k == memoryMillijoulesKey }

// appendHostAttrs appends r's final host shares, for the span exporter.
func (m *Monitor) appendHostAttrs(attrs []attribute.KeyValue, r *requestState) []attribute.KeyValue {
	h := m.host
	if h == nil || r.host == nil {
		return attrs
	}
	for class, has := range h.has {
		if has {
			attrs = append(attrs, hostKeys[class].Int64(int64(min(r.host[class].Load(), math.MaxInt64))))
		}
	}
	return attrs
}

// recordHost records a final request's host shares on the request-energy
// histogram, with its other attributes (opt) and hw.type. Sampler side.
func (m *Monitor) recordHost(ctx context.Context, st *requestState, opt metric.RecordOption) {
	h := m.host
	if h == nil || st.host == nil {
		return
	}
	for class, has := range h.has {
		if has {
			m.inst.requestEnergy.Record(ctx, float64(st.host[class].Load())/1000, opt, h.typeOpts[class])
		}
	}
}

// register observes the host devices' energy, and its processes' share
// that went to no request or to other processes, per device.
func (h *hostMeter) register(m *Monitor) error {
	meter := m.cfg.meterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	for _, d := range h.devs {
		h.devOpts = append(h.devOpts, metric.WithAttributeSet(attribute.NewSet(deviceAttrs(d.Device)...)))
	}
	in := m.inst
	var err error
	h.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for i, d := range h.devs {
			o.ObserveFloat64(in.energy, float64(d.acc.Total())/1000, h.devOpts[i])
			o.ObserveFloat64(in.other, float64(d.other.Load())/1000, h.devOpts[i])
			_, un := m.ledger.TimeSplit(i)
			o.ObserveFloat64(in.unattributed, float64(un)/1000, h.devOpts[i])
		}
		return nil
	}, in.energy, in.other, in.unattributed)
	return err
}

// close unregisters the host's instruments and closes its source. It is
// safe on a nil hostMeter.
func (h *hostMeter) close() error {
	if h == nil {
		return nil
	}
	var errs []error
	if h.reg != nil {
		errs = append(errs, h.reg.Unregister())
	}
	errs = append(errs, h.src.Close())
	return errors.Join(errs...)
}
