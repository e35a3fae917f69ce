package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/attrib"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/hostshare"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/procfs"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/ring"
)

// ScopeName is the instrumentation scope of the agent's instruments.
const ScopeName = "github.com/otelenergy/otelenergy/cmd/otelenergy-agent"

// Attribute keys the agent sets besides semconv's.
const (
	SharedKey   = attribute.Key("otelenergy.energy.shared")
	InstanceKey = attribute.Key("otelenergy.gpu.instance")
	ExitedKey   = attribute.Key("otelenergy.process.exited")
	OverflowKey = attribute.Key("otel.metric.overflow")
)

// Rings is what the agent reads of the library's Monitor: the metered
// boards and each one's counter steps. [NewMonitor] returns the library
// Monitor's, which otelenergy does not export.
type Rings interface {
	Devices() []otelenergy.Device
	Ring(i int) (ring.View, error)
}

// Lister lists board i's processes into b; see
// [nvmlsource.ProcessReader.Read], which implements it, for the contract.
type Lister interface {
	Read(i int, b *nvmlsource.BoardProcesses) error
}

// Resolver identifies processes: [procfs.FS] implements it.
type Resolver interface {
	StartTime(pid uint32) (uint64, error)
	Info(pid uint32) (procfs.Info, error)
}

// BootTimer is a Resolver that knows when the node booted, which its
// start times count from; [procfs.FS] implements it.
type BootTimer interface {
	BootTime() (time.Time, error)
}

// Config is what [New] needs.
type Config struct {
	// Rings gives the boards and their counter steps: the library's
	// Monitor. Required.
	Rings Rings
	// Lister lists each board's processes: an
	// [nvmlsource.ProcessReader], or the simulator. Required.
	Lister Lister
	// Resolver identifies processes: [procfs.FS] over the host's /proc,
	// or the simulator. Required.
	Resolver Resolver
	// MaxSeries caps the per-process series, live and exited ones not yet
	// exported, over all boards; zero or less selects
	// [flags.DefaultMaxSeries].
	MaxSeries int
	// IdleWatts, when positive, fixes every board's static power instead
	// of learning it.
	IdleWatts float64
	// MeterProvider registers the instruments; nil selects the global one.
	MeterProvider metric.MeterProvider
	// BootTime is when the node booted, which process start times count
	// from, for process.creation.time. Zero asks the Resolver, when it is
	// a [BootTimer], and else counts from the Unix epoch, which keeps the
	// attribute distinct per start time.
	BootTime time.Time
	// SampleHold is how long a counter interval waits for the utilization
	// samples that cover it before it is split without them; zero selects
	// attrib.DefaultHold (2 s), and a negative hold waits for nothing. hw.energy trails the counter by
	// up to this plus one process interval.
	SampleHold time.Duration
	// Now and Epoch serve only Rings without a Clock method (the
	// Monitor's rings from [NewMonitor] have one, and the agent then reads
	// the Monitor's clock on both scales at once, see [ClockedRings]). Now is the
	// clock that NVML's sample timestamps (CPU time in µs) are read
	// against; nil selects time.Now. Samples more than a minute off it
	// are on a clock of their own, and are taken to describe the pass
	// they arrive in, unaligned.
	Now func() time.Time
	// Epoch is when the Rings' time scale is zero, on Now's clock. The
	// zero value selects Now() at New.
	Epoch time.Time
	// Carbon, when set, converts each process's energy into emissions,
	// interval by interval (otelenergy.process.co2e), and exports the
	// intensity in force; nil exports no emissions. The agent calls its
	// Note and Interval, so it must be the agent's own.
	Carbon *carbon.Model
	// CarbonAge gives the age of the intensity, for
	// otelenergy.carbon.intensity.age: the poller's Age; nil exports none.
	CarbonAge func() (time.Duration, bool)
	// Host, when not nil, splits the host's CPU and DRAM energy among the
	// processes with a series of their own at every pass, and its figures
	// are exported beside the boards' (see package hostshare).
	Host *hostshare.Host
}

// ticksPerSecond is USER_HZ, the unit of /proc/<pid>/stat's start time:
// 100 on every Linux architecture's user ABI.
const ticksPerSecond = 100

// Agent splits each board's energy among its processes. Create one with
// [New]. All methods are safe for concurrent use.
type Agent struct {
	cfg    Config
	boards []*board
	epoch  int64 // Epoch in Unix ns
	clock  func() (ring int64, wall time.Time)

	mu     sync.Mutex
	gen    uint64
	series int // per-process series held, over all boards
	passes atomic.Uint64

	overflowed atomic.Uint64
	inst       instruments
	boot       time.Time
	em         emissions
	hostProcs  []hostshare.Proc // reused by each pass
}

// series is one process's total on one board, or one of a board's
// aggregate series.
type series struct {
	pid    uint32
	start  uint64
	mj     uint64
	ug     uint64 // emissions, µg CO2e, with carbon on
	opt    metric.ObserveOption
	ident  []attribute.KeyValue // opt's process attributes, for the host's series
	seen   uint64               // the pass that last saw it listed or sampled
	exited bool
	// overflow marks a process beyond the cap: it has no series of its
	// own, its energy goes to the board's overflow series, and it is
	// tracked per pid only so that it is dropped when it is gone.
	overflow bool
}

type board struct {
	dev       otelenergy.Device
	hwOpt     metric.ObserveOption
	idOpt     metric.ObserveOption
	modelOpts modelOpts
	shared    bool // the latest listing had no per-process utilization
	// cur walks the board's ring from zero, so that its intervals add up
	// to hw.energy; lastT and lastE end the newest interval given out,
	// and held says an interval of no energy began at heldT0 and is
	// merged into the next.
	cur     ring.Cursor
	lastE   uint64
	lastT   int64
	held    bool
	heldT0  int64
	static  procshare.Static // boards without per-process utilization
	att     *attrib.Board
	res     attrib.Result
	smp     []attrib.Sample
	listing nvmlsource.BoardProcesses
	wallOff int64                // the wall clock less the ring's at the previous split
	known   map[uint32]knownProc // each pid's latest process with a series, for samples that come after it ended

	procs    map[uint32]*series // the current process of each pid, overflow ones included
	exiting  []*series          // no longer listed, observed once more
	overflow series             // the processes beyond the cap
	exited   series             // the totals of ended series

	idleMJ, unattributedMJ uint64
	co2eRestUG             uint64 // emissions no process was given
	listErrors             atomic.Uint64
	listed                 int // processes in the latest successful listing
	failing, lost          bool

	ivs     []procshare.Interval
	slots   []*series // nil: unattributed
	weights []uint64
	out     []uint64
}

// New returns an Agent over cfg's boards and registers its instruments.
func New(cfg Config) (*Agent, error) {
	if cfg.Rings == nil || cfg.Lister == nil || cfg.Resolver == nil {
		return nil, errors.New("agent: Rings, Lister and Resolver are required")
	}
	if cfg.MaxSeries <= 0 {
		cfg.MaxSeries = flags.DefaultMaxSeries
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Epoch.IsZero() {
		cfg.Epoch = cfg.Now()
	}
	a := &Agent{cfg: cfg, epoch: cfg.Epoch.UnixNano(), boot: cfg.BootTime, em: emissions{model: cfg.Carbon, age: cfg.CarbonAge}}
	a.clock = a.ownClock
	if c, ok := cfg.Rings.(ringClock); ok {
		a.clock = c.Clock
	}
	if bt, ok := cfg.Resolver.(BootTimer); ok && a.boot.IsZero() {
		if t, err := bt.BootTime(); err == nil {
			a.boot = t
		}
	}
	if a.boot.IsZero() {
		a.boot = time.Unix(0, 0)
	}
	for i, d := range cfg.Rings.Devices() {
		id := semconv.HwID(d.ID)
		b := &board{
			dev: d,
			cur: ring.FromZero(),
			hwOpt: metric.WithAttributeSet(attribute.NewSet(id, semconv.HwTypeKey.String(d.HWType()),
				semconv.HwName(d.Name), semconv.HwVendor(d.Vendor))),
			idOpt:     metric.WithAttributeSet(attribute.NewSet(id)),
			modelOpts: newModelOpts(d.ID),
			static:    procshare.Static{Fixed: cfg.IdleWatts},
			att:       attrib.New(attrib.Config{Hold: cfg.SampleHold, IdleWatts: cfg.IdleWatts, Dev: i}),
			procs:     make(map[uint32]*series),
		}
		if a.em.on() {
			b.att = attrib.New(attrib.Config{Hold: cfg.SampleHold, IdleWatts: cfg.IdleWatts, Dev: i, OnSplit: a.onSplit(b)})
		}
		b.overflow.opt = metric.WithAttributeSet(attribute.NewSet(id, OverflowKey.Bool(true)))
		b.exited.opt = metric.WithAttributeSet(attribute.NewSet(id, ExitedKey.Bool(true)))
		a.boards = append(a.boards, b)
	}
	if len(a.boards) == 0 {
		return nil, errors.New("agent: no boards")
	}
	if err := a.inst.register(a); err != nil {
		return nil, err
	}
	a.noteCarbon()
	return a, nil
}

// Shutdown unregisters the instruments.
func (a *Agent) Shutdown() error { return a.inst.unregister() }

// Passes returns the number of passes completed.
func (a *Agent) Passes() uint64 { return a.passes.Load() }

// Ready reports whether a pass has completed and some board is not lost.
func (a *Agent) Ready() bool {
	if a.passes.Load() == 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, b := range a.boards {
		if !b.lost {
			return true
		}
	}
	return false
}

// Pass splits every board's counter intervals since the previous pass.
func (a *Agent) Pass() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen++
	a.noteCarbon()
	a.readBoot()
	for i, b := range a.boards {
		a.passBoard(i, b)
	}
	if a.cfg.Host != nil {
		a.passHost()
	}
	a.passes.Add(1)
}

func (a *Agent) passBoard(i int, b *board) {
	ivs := a.intervals(i, b)
	mode := procshare.Unknown
	partial := false // some MIG instance could not be listed
	if !b.lost {
		err := a.cfg.Lister.Read(i, &b.listing)
		switch {
		case err == nil && b.listing.InstanceErrors > 0:
			partial = true
			b.listErrors.Add(uint64(b.listing.InstanceErrors))
			if !b.failing {
				otel.Handle(fmt.Errorf("agent: GPU %s: %w", b.dev.ID, b.listing.InstanceErr))
			}
			b.failing = true
			mode = procshare.Unmeasured
			b.shared = true
		case err == nil:
			b.failing = false
			b.listed = 0
			for k := range b.listing.Processes {
				if b.listing.Processes[k].Listed {
					b.listed++
				}
			}
			mode = procshare.Measured
			b.shared = b.listing.Utilization == nvmlsource.UtilUnsupported
			if b.shared {
				mode = procshare.Unmeasured
			}
		case errors.Is(err, otelenergy.ErrDeviceLost), errors.Is(err, otelenergy.ErrUnavailable):
			b.lost = true
			b.listErrors.Add(1)
			otel.Handle(fmt.Errorf("agent: GPU %s: %w", b.dev.ID, err))
		default:
			b.listErrors.Add(1)
			if !b.failing {
				otel.Handle(fmt.Errorf("agent: GPU %s: %w", b.dev.ID, err))
			}
			b.failing = true
		}
	}
	b.slots, b.weights = b.slots[:0], b.weights[:0]
	if mode != procshare.Unknown {
		for k := range b.listing.Processes {
			p := &b.listing.Processes[k]
			if mode == procshare.Unmeasured && !p.Listed {
				continue
			}
			s := a.lookup(b, p)
			b.slots = append(b.slots, s)
			w := p.SmUtil
			if mode == procshare.Unmeasured {
				w = p.Weight
			}
			b.weights = append(b.weights, w)
		}
		if partial && b.listing.UnlistedWeight > 0 {
			// The share of the instances that could not be listed.
			b.slots = append(b.slots, nil)
			b.weights = append(b.weights, b.listing.UnlistedWeight)
		}
	}
	if mode == procshare.Measured {
		a.splitAligned(b, ivs)
		ivs = nil
	} else if b.att.PendingMJ() > 0 {
		// Intervals held for samples that will not come now: split them
		// by those that came.
		b.att.Split(0, true, &b.res)
		a.give(b, &b.res)
	}
	if len(ivs) > 0 {
		if cap(b.out) < len(b.weights) {
			b.out = make([]uint64, len(b.weights), 2*len(b.weights))
		}
		b.out = b.out[:len(b.weights)]
		clear(b.out)
		staticW := b.att.IdleWatts()
		if b.shared {
			staticW = b.static.Watts()
		}
		r := a.window(b, ivs, staticW, mode)
		b.idleMJ += r.IdleMJ
		b.unattributedMJ += r.UnattributedMJ
		for k, s := range b.slots {
			if s == nil {
				b.unattributedMJ += b.out[k]
			} else {
				s.mj += b.out[k]
			}
		}
		// A board without per-process utilization still says it is idle
		// when it lists no process.
		if mode == procshare.Unmeasured && len(b.slots) == 0 {
			var e uint64
			for _, iv := range ivs {
				e += iv.EnergyMJ
			}
			b.static.Observe(ivs[len(ivs)-1].T1-ivs[0].T0, e, 0)
		}
	}
	if mode == procshare.Unknown && !b.lost || partial {
		return // unknown who runs (there): the series stay as they are
	}
	for pid, s := range b.procs {
		if s.seen != a.gen && !a.alive(b, s) {
			delete(b.procs, pid)
			a.retire(b, s)
		}
	}
}

// passHost gives the host's split the processes with a series of their
// own: a process beyond the series cap has none on the host either, and
// its CPU energy is the domain's unattributed energy.
func (a *Agent) passHost() {
	a.hostProcs = a.hostProcs[:0]
	for _, b := range a.boards {
		for _, s := range b.procs {
			if !s.overflow {
				a.hostProcs = append(a.hostProcs, hostshare.Proc{Pid: s.pid, Start: s.start, Attrs: s.ident})
			}
		}
	}
	var em hostshare.Emissions // nil: carbon off
	if a.em.on() {
		em = &a.em
	}
	a.cfg.Host.Pass(a.hostProcs, em)
}

// HostTotals returns the host's split domain i's figures as of the latest
// pass; for tests and diagnostics. It panics without a Config.Host.
func (a *Agent) HostTotals(i int) hostshare.Totals {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Host.Totals(i)
}

// alive reports whether the process of series s, which the latest listing
// missed, still runs on a board that is not lost. A listing can miss a
// live process (a listing between its contexts, a driver hiccup); ending
// its series would move its total to the exited series at the next
// export, and a later listing would start a new series with the same
// attributes back at zero: a counter going backwards. So a series ends
// only when its process is gone or its pid holds another process. A
// process that no longer uses the board keeps its series, unchanged,
// while it lives.
func (a *Agent) alive(b *board, s *series) bool {
	if b.lost || s.overflow {
		return false
	}
	start, err := a.cfg.Resolver.StartTime(s.pid)
	return err == nil && start == s.start
}

// intervals returns board i's counter intervals since the previous pass,
// oldest first, and advances the board past them. The series starts at
// the oldest step still held, at zero (the tracker's total counts from
// the Monitor's first reading), and an interval of no energy is merged
// into the next one, so that every interval given out has energy.
func (a *Agent) intervals(i int, b *board) []procshare.Interval {
	b.ivs = b.ivs[:0]
	v, err := a.cfg.Rings.Ring(i)
	if err != nil {
		return nil
	}
	for {
		iv, ok := b.cur.Next(v)
		if !ok {
			break
		}
		if iv.EnergyMJ == 0 {
			if !b.held {
				b.held, b.heldT0 = true, iv.T0
			}
			continue
		}
		if b.held {
			iv.T0, b.held = b.heldT0, false
		}
		b.ivs = append(b.ivs, iv)
		b.lastT, b.lastE = iv.T1, b.lastE+iv.EnergyMJ
	}
	return b.ivs
}

// lookup returns the series of listed or sampled process p on board b,
// creating it when the pid is new on the board or now holds another
// process; nil means unattributed (a process that cannot be identified).
//
// A listed pid's start time is read at every pass, so that a pid reused
// from one listing to the next, with no pass in between that missed it,
// is still a new process.
func (a *Agent) lookup(b *board, p *nvmlsource.ProcessUsage) *series {
	s, ok := b.procs[p.Pid]
	if ok && !p.Listed {
		return s.target(b)
	}
	if !ok && !p.Listed {
		// Sampled but no longer listed: a process gone since its sample.
		// Its series, if it had one, was retired in an earlier pass.
		for _, s := range b.exiting {
			if s.pid == p.Pid {
				return s
			}
		}
		return nil
	}
	start, err := a.cfg.Resolver.StartTime(p.Pid)
	if err != nil {
		if ok {
			// Gone since the listing: still the same process until a
			// listing misses it.
			s.seen = a.gen
			return s.target(b)
		}
		return nil
	}
	if ok {
		if s.start == start {
			s.seen = a.gen
			if s.overflow && a.series < a.cfg.MaxSeries {
				// The cap has room again: the process leaves the overflow
				// series for one of its own, a new attribute set that
				// starts at zero, so nothing goes backwards.
				if own := a.newSeries(b, p, start); own != nil {
					return own
				}
			}
			return s.target(b)
		}
		// The pid holds a new process: the old one ended.
		delete(b.procs, p.Pid)
		a.retire(b, s)
	}
	for k, s := range b.exiting {
		if s.pid == p.Pid && s.start == start {
			// Listed again before its last export: the same process.
			s.exited, s.seen = false, a.gen
			b.exiting = append(b.exiting[:k], b.exiting[k+1:]...)
			b.procs[p.Pid] = s
			return s
		}
	}
	if a.series >= a.cfg.MaxSeries {
		a.overflowed.Add(1)
		b.procs[p.Pid] = &series{pid: p.Pid, start: start, seen: a.gen, overflow: true}
		return &b.overflow
	}
	return a.newSeries(b, p, start)
}

// newSeries gives listed process p, which started at start, a series of
// its own on board b; nil when it cannot be identified.
func (a *Agent) newSeries(b *board, p *nvmlsource.ProcessUsage, start uint64) *series {
	info, err := a.cfg.Resolver.Info(p.Pid)
	if err != nil || info.StartTime != start {
		return nil
	}
	attrs := []attribute.KeyValue{
		semconv.HwID(b.dev.ID), // first: the host's series replace it
		semconv.ProcessPID(int(p.Pid)),
		semconv.ProcessExecutableName(info.Name),
		// The pid and the start time together name the process, so that
		// a reused pid's series is a new series and no counter goes
		// backwards.
		semconv.ProcessCreationTime(a.creationTime(start)),
	}
	if info.ContainerID != "" {
		attrs = append(attrs, semconv.ContainerID(info.ContainerID))
	}
	if info.PodUID != "" {
		attrs = append(attrs, semconv.K8SPodUID(info.PodUID))
	}
	// A copy: attribute.NewSet below sorts attrs in place, and a slice of
	// it would then hold hw.id and lose the container.id sorted before it.
	ident := slices.Clone(attrs[1:])
	if b.shared {
		attrs = append(attrs, SharedKey.Bool(true))
	}
	if p.Instance != "" {
		attrs = append(attrs, InstanceKey.String(p.Instance))
	}
	s := &series{pid: p.Pid, start: start, seen: a.gen, opt: metric.WithAttributeSet(attribute.NewSet(attrs...)), ident: ident}
	a.series++
	b.procs[p.Pid] = s
	return s
}

// target is where a process's energy goes: its own series, or the
// board's overflow series.
func (s *series) target(b *board) *series {
	if s.overflow {
		return &b.overflow
	}
	return s
}

// retire ends a process no longer on the board: its series is observed
// once more and then moves to the exited series; an overflow process is
// simply forgotten.
func (a *Agent) retire(b *board, s *series) {
	if s.overflow {
		return
	}
	s.exited = true
	b.exiting = append(b.exiting, s)
}

// readBoot rereads the boot time from a Resolver that knows it, unless
// Config.BootTime fixed it. The kernel's boot time is the wall clock less
// the time since boot, so a step of the wall clock (NTP, a VM resume)
// moves it: read once, it would put every process started after a step
// back of Δ that much after the samples stamped on the new timeline,
// and keyAt would give the first Δ of its samples to its predecessor.
// A failed read keeps the last one.
func (a *Agent) readBoot() {
	if !a.cfg.BootTime.IsZero() {
		return
	}
	if bt, ok := a.cfg.Resolver.(BootTimer); ok {
		if t, err := bt.BootTime(); err == nil {
			a.boot = t
		}
	}
}

// creationTime is semconv's process.creation.time of a process that
// started start clock ticks after boot: ISO 8601 in UTC, to the tick.
// A tick is a whole number of nanoseconds, so the product is exact and
// overflows only past 292 years of uptime; start*time.Second would
// overflow past 2.9.
func (a *Agent) creationTime(start uint64) string {
	t := a.boot.Add(time.Duration(start) * (time.Second / ticksPerSecond))
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// Totals are one board's cumulative figures, in millijoules.
type Totals struct {
	// EnergyMJ is the board's energy up to the newest split step.
	EnergyMJ uint64
	// IdleMJ and UnattributedMJ are the board's idle and unattributed
	// energy.
	IdleMJ, UnattributedMJ uint64
	// ExitedMJ and OverflowMJ are the exited and overflow series.
	ExitedMJ, OverflowMJ uint64
	// Processes maps each process series (live or exiting) to its total.
	Processes map[Process]uint64
	// OverflowPids counts the processes beyond the cap still tracked:
	// those listed at the latest pass.
	OverflowPids int
	// IdleWatts is the board's static power as learned so far, IdleSource
	// where it comes from (attrib.IdleSourceNames; "procshare.Static" on a
	// board without per-process utilization) and IdleData the seconds of
	// data behind it after forgetting.
	IdleWatts  float64
	IdleSource string
	IdleData   float64
	// Model is the board's power model (attrib.TermNames), and
	// ModelLearned whether it splits the energy yet.
	Model        [attrib.NumTerms]float64
	ModelLearned bool
}

// Process identifies a process series.
type Process struct {
	Pid       uint32
	StartTime uint64
}

// Totals returns board i's figures as of the latest pass; for tests and
// diagnostics, it allocates.
func (a *Agent) Totals(i int) Totals {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.boards[i]
	t := Totals{EnergyMJ: b.splitE(), IdleMJ: b.idleMJ, UnattributedMJ: b.unattributedMJ,
		ExitedMJ: b.exited.mj, OverflowMJ: b.overflow.mj, Processes: map[Process]uint64{}, IdleWatts: b.idleWatts()}
	t.Model, t.ModelLearned = b.att.Model()
	if b.shared {
		t.IdleSource = "procshare.Static"
	} else {
		_, src, sec := b.att.Idle()
		t.IdleSource, t.IdleData = attrib.IdleSourceNames[src], sec
	}
	for _, s := range b.procs {
		if s.overflow {
			t.OverflowPids++
		} else {
			t.Processes[Process{s.pid, s.start}] += s.mj
		}
	}
	for _, s := range b.exiting {
		t.Processes[Process{s.pid, s.start}] += s.mj
	}
	return t
}

// observe exports every board's figures, then ends the series of the
// processes that exited since the previous export.
func (a *Agent) observe(_ context.Context, o metric.Observer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	in := &a.inst
	j := func(mj uint64) float64 { return float64(mj) / 1000 }
	for _, b := range a.boards {
		o.ObserveFloat64(in.energy, j(b.splitE()), b.hwOpt)
		o.ObserveFloat64(in.idle, j(b.idleMJ), b.idOpt)
		o.ObserveFloat64(in.unattributed, j(b.unattributedMJ), b.idOpt)
		o.ObserveFloat64(in.process, j(b.exited.mj), b.exited.opt)
		o.ObserveFloat64(in.process, j(b.overflow.mj), b.overflow.opt)
		o.ObserveInt64(in.listErrors, int64(b.listErrors.Load()), b.idOpt)
		if !b.lost {
			o.ObserveInt64(in.processes, int64(b.listed), b.idOpt)
		}
		for _, s := range b.procs {
			if !s.overflow {
				o.ObserveFloat64(in.process, j(s.mj), s.opt)
			}
		}
		a.observeCarbon(o, b)
		for k, s := range b.exiting {
			o.ObserveFloat64(in.process, j(s.mj), s.opt)
			b.exited.mj += s.mj
			b.exited.ug += s.ug
			a.series--
			b.exiting[k] = nil
		}
		b.exiting = b.exiting[:0]
	}
	o.ObserveInt64(in.overflow, int64(a.overflowed.Load()))
	if a.cfg.Host != nil {
		// With carbon off, the emissions instruments are nil: no series.
		a.cfg.Host.Observe(o, hostshare.Instruments{Energy: in.energy, Process: in.process, Idle: in.idle,
			Unattributed: in.unattributed, HostEnergy: in.hostEnergy, ProcessCo2e: a.em.process, Co2eUnattributed: a.em.rest})
	}
	return nil
}

type instruments struct {
	reg                                             metric.Registration
	energy, process, idle, unattributed, hostEnergy metric.Float64ObservableCounter
	overflow, listErrors                            metric.Int64ObservableCounter
	processes                                       metric.Int64ObservableGauge
	model                                           modelInstruments
	em                                              *emissions
}

func (in *instruments) register(a *Agent) error {
	m := a.cfg.MeterProvider.Meter(ScopeName)
	var errs [8]error
	in.energy, errs[0] = m.Float64ObservableCounter("hw.energy", metric.WithUnit("J"),
		metric.WithDescription("Energy consumed by the device, from its cumulative energy counter, up to the newest counter step the agent has split."))
	in.process, errs[1] = m.Float64ObservableCounter("otelenergy.process.energy", metric.WithUnit("J"),
		metric.WithDescription("Each compute process's share of a device's energy: of a GPU board above its static part, by SM utilization (even shares of a board without per-process utilization carry otelenergy.energy.shared); of a RAPL domain (hw.type cpu or memory) above its idle part, by the process's CPU time."))
	in.idle, errs[2] = m.Float64ObservableCounter("otelenergy.energy.idle", metric.WithUnit("J"),
		metric.WithDescription("The board's static part: its learned static power over each counter interval, capped at the interval's energy."))
	in.unattributed, errs[3] = m.Float64ObservableCounter("otelenergy.energy.unattributed", metric.WithUnit("J"),
		metric.WithDescription("Energy above the static part that no process could be given: no process listed, no utilization sample, or a failed listing."))
	in.overflow, errs[4] = m.Int64ObservableCounter("otelenergy.agent.series.overflow", metric.WithUnit("{process}"),
		metric.WithDescription("Processes whose energy went to the overflow series because the series cap was reached."))
	in.listErrors, errs[5] = m.Int64ObservableCounter("otelenergy.process.listing.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Failed listings of a board's processes."))
	in.processes, errs[6] = m.Int64ObservableGauge("otelenergy.device.processes", metric.WithUnit("{process}"),
		metric.WithDescription("Compute processes on the board at the latest successful listing; absent for a lost board."))
	in.hostEnergy, errs[7] = m.Float64ObservableCounter("hw.host.energy", metric.WithUnit("J"),
		metric.WithDescription("Energy of the whole host, from a platform counter (RAPL psys) that covers the CPUs, their memory and more; never a sum of hw.energy's parts."))
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	if err := in.model.register(a, m); err != nil {
		return err
	}
	if err := a.em.register(m); err != nil {
		return err
	}
	observed := []metric.Observable{in.energy, in.process, in.idle, in.unattributed, in.hostEnergy, in.overflow, in.listErrors, in.processes}
	if a.em.on() {
		observed = append(observed, a.em.process, a.em.rest)
	}
	var err error
	in.reg, err = m.RegisterCallback(a.observe, observed...)
	in.em = &a.em
	return err
}

func (in *instruments) unregister() error {
	err := in.model.unregister()
	if in.em != nil {
		err = errors.Join(err, in.em.unregister())
	}
	if in.reg == nil {
		return err
	}
	return errors.Join(err, in.reg.Unregister())
}
