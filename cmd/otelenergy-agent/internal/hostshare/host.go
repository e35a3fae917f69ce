package hostshare

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/internal/cputime"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/tracker"
)

// ExitedKey marks a domain's series that holds the totals of processes
// whose own series has ended, as the agent's GPU boards do.
const ExitedKey = attribute.Key("otelenergy.process.exited")

// CPU reads CPU time: cputime.Trees over /proc, or the simulator.
type CPU interface {
	// NodeTicks returns the node's busy and total CPU ticks since boot.
	NodeTicks() (busy, total uint64, err error)
	// CPUTicks returns pid's own CPU ticks (utime + stime) and its start
	// time.
	CPUTicks(pid uint32) (ticks, start uint64, err error)
}

// TreeCPU is a [CPU] that measures, pass by pass, each tracked process
// with its children (cputime.Trees.Pass is the contract): ticks[i] is the
// CPU time of process pids[i] (start time starts[i]) and its untracked
// descendants since the previous pass, alive[i] whether it runs, and
// dBusy and dTotal the node's ticks since then; ok is false when there
// is no such interval.
type TreeCPU interface {
	CPU
	Pass(pids []uint32, starts []uint64, ticks []uint64, alive []bool) (dBusy, dTotal uint64, ok bool, err error)
}

// ownTicks is the TreeCPU of a CPU that is not one: each process by its
// own ticks, from its second pass on (its time before the agent first saw
// it is in no interval of the agent's).
type ownTicks struct {
	CPU
	primed      bool
	busy, total uint64
	prev, next  map[key]uint64 // each process's ticks at the previous and this pass
}

func (o *ownTicks) Pass(pids []uint32, starts []uint64, ticks []uint64, alive []bool) (dBusy, dTotal uint64, ok bool, err error) {
	clear(ticks[:len(pids)])
	clear(alive[:len(pids)])
	busy, total, err := o.NodeTicks()
	if err != nil {
		o.primed = false
		return 0, 0, false, err
	}
	ok = o.primed && total > o.total
	if ok {
		dBusy, dTotal = busy-min(busy, o.busy), total-o.total
	}
	o.primed, o.busy, o.total = true, busy, total
	if o.next == nil {
		o.prev, o.next = map[key]uint64{}, map[key]uint64{}
	}
	clear(o.next)
	for i, pid := range pids {
		t, start, err := o.CPUTicks(pid)
		if err != nil || start != starts[i] {
			continue // gone; its series ends when the agent drops it
		}
		alive[i] = true
		k := key{pid, start}
		if was, seen := o.prev[k]; seen && ok && t >= was {
			ticks[i] = t - was
		}
		o.next[k] = t
	}
	o.prev, o.next = o.next, o.prev
	return dBusy, dTotal, ok, nil
}

// Proc is a process the agent tracks, as [Host.Pass] takes it.
type Proc struct {
	Pid uint32
	// Start is its start time in ticks since boot; with the pid it names
	// the process.
	Start uint64
	// Attrs are its identity attributes (process.pid,
	// process.creation.time, ...), without hw.id, which the domain adds.
	// Read once, when the process is first seen.
	Attrs []attribute.KeyValue
}

// Config is what [New] needs.
type Config struct {
	// Domains is the RAPL source of the split domains (package and DRAM):
	// energysource.Host's. Required.
	Domains otelenergy.Source
	// Whole, when not nil, is a whole-host source (RAPL psys), exported
	// as hw.host.energy and never split.
	Whole otelenergy.Source
	// CPU reads the CPU times: a [TreeCPU] (cputime.Trees over the
	// host's /proc) measures each tracked process with its children;
	// any other CPU, by its own ticks alone. Required; the Host is its
	// only user.
	CPU CPU
	// Now is the monotonic clock the counters' tracker reads, in ns; nil
	// is time since New.
	Now func() int64
}

// Emissions converts one domain's split of one pass into emissions; the
// agent's carbon model implements it. [Host.Pass] calls it on Pass's
// goroutine, once per split domain whose counter was read, after the
// split: the caller decides the intensity (the one in force at its pass)
// and owns the model's one-goroutine rule.
type Emissions interface {
	// Convert writes the µg CO2e of sharesMJ[i] into ug[i] (len(ug) ≥
	// len(sharesMJ)) and returns the µg of restMJ, so that, exactly,
	// Σ ug[:len(sharesMJ)] + rest is the emissions of Σ sharesMJ + restMJ,
	// rounded once.
	Convert(sharesMJ []uint64, restMJ uint64, ug []uint64) (restUG uint64)
}

// Instruments are the agent's instruments the host's figures go to.
type Instruments struct {
	Energy, Process, Idle, Unattributed, HostEnergy metric.Float64ObservableCounter
	// ProcessCo2e and Co2eUnattributed, in g, receive the emissions
	// [Host.Pass] converted; nil (carbon off) exports none.
	ProcessCo2e, Co2eUnattributed metric.Float64ObservableCounter
}

// Host splits the host's RAPL domains among the tracked processes. Create
// one with [New]. See the package doc for its concurrency.
type Host struct {
	cfg           Config
	cpu           TreeCPU
	domains       []*domain
	whole         []*domain
	gen           uint64        // the pass, which marks the processes it was given
	procs         map[key]*proc // every series until its last Observe
	dBusy, dTotal uint64        // the node's busy and all CPU ticks over this pass's interval
	cpuOK         bool          // this pass has a CPU-time interval to split by
	failing       bool          // /proc's failure was reported

	list   []*proc // this pass's processes, in the order given
	pids   []uint32
	starts []uint64
	alive  []bool
	ticks  []uint64
	out    []uint64
	ug     []uint64 // out's emissions
}

type key struct {
	pid   uint32
	start uint64
}

type domain struct {
	dev    otelenergy.Device
	src    otelenergy.Source
	i      int
	tr     tracker.Tracker
	stale  bool // a read failed since the previous split
	hwOpt  metric.ObserveOption
	idOpt  metric.ObserveOption
	exOpt  metric.ObserveOption
	energy uint64
	idle   uint64
	unattr uint64
	exited uint64
	errors uint64
	// co2eRest is the µg of idle and unattributed energy, co2eExited
	// those of ended processes: with the processes' µg they add up, per
	// pass, to the emissions of energy.
	co2eRest, co2eExited uint64
}

type proc struct {
	key
	attrs   []attribute.KeyValue
	opts    []metric.ObserveOption // per domain, built on first observe
	mj      []uint64               // per domain
	ug      []uint64               // per domain, µg CO2e
	seen    uint64
	exiting bool
}

// New returns a Host over cfg's sources; it reads nothing yet.
func New(cfg Config) (*Host, error) {
	if cfg.Domains == nil || cfg.CPU == nil {
		return nil, errors.New("hostshare: Domains and CPU are required")
	}
	if cfg.Now == nil {
		t0 := time.Now()
		cfg.Now = func() int64 { return int64(time.Since(t0)) }
	}
	h := &Host{cfg: cfg, procs: make(map[key]*proc)}
	if t, ok := cfg.CPU.(TreeCPU); ok {
		h.cpu = t
	} else {
		h.cpu = &ownTicks{CPU: cfg.CPU}
	}
	h.domains = newDomains(cfg.Domains)
	if cfg.Whole != nil {
		h.whole = newDomains(cfg.Whole)
	}
	if len(h.domains) == 0 {
		return nil, errors.New("hostshare: the host source has no domain")
	}
	return h, nil
}

func newDomains(s otelenergy.Source) []*domain {
	var ds []*domain
	for i, d := range s.Devices() {
		id := semconv.HwID(d.ID)
		attrs := []attribute.KeyValue{id, semconv.HwTypeKey.String(d.HWType()), semconv.HwName(d.Name)}
		if d.Vendor != "" {
			attrs = append(attrs, semconv.HwVendor(d.Vendor))
		}
		ds = append(ds, &domain{
			dev: d, src: s, i: i,
			// The library's tracker and plausibility guard: RAPL zones
			// come unwrapped from the source, and the tracker turns a
			// counter that restarts into a reset rather than a negative
			// delta, and a jump past the power bound into a glitch.
			tr:    tracker.New(tracker.Limits{CounterMax: d.CounterMax, MaxWatts: d.PowerBound(), MaxWattsFirm: d.MaxWattsFirm}),
			hwOpt: metric.WithAttributeSet(attribute.NewSet(attrs...)),
			idOpt: metric.WithAttributeSet(attribute.NewSet(id)),
			exOpt: metric.WithAttributeSet(attribute.NewSet(id, semconv.HwTypeKey.String(d.HWType()), ExitedKey.Bool(true))),
		})
	}
	return ds
}

// Devices returns the split domains, then the whole-host ones.
func (h *Host) Devices() []otelenergy.Device {
	var out []otelenergy.Device
	for _, d := range h.domains {
		out = append(out, d.dev)
	}
	for _, d := range h.whole {
		out = append(out, d.dev)
	}
	return out
}

// Pass reads every domain's counter and the CPU times of the node and of
// procs, and splits each domain's energy since the previous pass. A
// process tracked before and not in procs has ended: its series is
// observed once more by the next [Host.Observe], then its total moves to
// the domain's exited series. procs may hold a process more than once
// (a process on two boards).
//
// With em not nil, each domain's split of the pass is converted into
// emissions through em, once: the processes' parts as the shares, idle
// and unattributed energy as the rest, so that per domain and pass
// Σ process µg + rest µg is the domain's energy converted, rounded once.
func (h *Host) Pass(procs []Proc, em Emissions) {
	h.gen++
	h.list = h.list[:0]
	for i := range procs {
		p := &procs[i]
		k := key{p.Pid, p.Start}
		s, ok := h.procs[k]
		if ok && s.seen == h.gen {
			continue
		}
		if !ok {
			buf := make([]uint64, 2*len(h.domains))
			s = &proc{key: k, attrs: p.Attrs, mj: buf[:len(h.domains)], ug: buf[len(h.domains):]}
			h.procs[k] = s
		}
		s.seen, s.exiting = h.gen, false
		h.list = append(h.list, s)
	}
	for _, s := range h.procs {
		if s.seen != h.gen {
			s.exiting = true
		}
	}

	if cap(h.ticks) < len(h.list) {
		n := 2 * len(h.list)
		h.pids, h.starts, h.alive = make([]uint32, 0, n), make([]uint64, 0, n), make([]bool, 0, n)
		h.ticks, h.out, h.ug = make([]uint64, 0, n), make([]uint64, 0, n), make([]uint64, 0, n)
	}
	n := len(h.list)
	h.pids, h.starts, h.alive = h.pids[:n], h.starts[:n], h.alive[:n]
	h.ticks, h.out, h.ug = h.ticks[:n], h.out[:n], h.ug[:n]
	for i, s := range h.list {
		h.pids[i], h.starts[i] = s.pid, s.start
	}
	dBusy, dTotal, ok, err := h.cpu.Pass(h.pids, h.starts, h.ticks, h.alive)
	h.cpuOK = ok
	if err != nil {
		if !h.failing {
			otel.Handle(fmt.Errorf("hostshare: reading the CPU times: %w", err))
		}
		// The next pass takes new baselines rather than split a node
		// interval of two passes by process intervals of one.
		h.failing = true
	} else {
		h.failing = false
		h.dBusy, h.dTotal = dBusy, dTotal
	}
	// A pass without a CPU-time interval attributes nothing; its reading
	// is still the baseline of the next pass's interval.
	now := h.cfg.Now()
	for di, d := range h.domains {
		e, ok := d.read(now)
		if !ok {
			continue
		}
		d.energy += e
		if !h.cpuOK || d.stale {
			d.stale = false
			d.unattr += e
			if em != nil {
				d.co2eRest += em.Convert(nil, e, nil)
			}
			continue
		}
		idle, un := cputime.Split(e, h.dBusy, h.dTotal, h.ticks, h.out)
		d.idle += idle
		d.unattr += un
		for i, s := range h.list {
			s.mj[di] += h.out[i]
		}
		if em != nil {
			d.co2eRest += em.Convert(h.out, idle+un, h.ug)
			for i, s := range h.list {
				s.ug[di] += h.ug[i]
			}
		}
	}
	for _, d := range h.whole {
		if e, ok := d.read(now); ok {
			d.energy += e
		}
	}
}

// read returns the energy since the previous reading; false when the
// counter could not be read (the domain is then stale: the interval of its
// next reading spans more than one pass).
func (d *domain) read(now int64) (uint64, bool) {
	raw, err := d.src.ReadEnergy(d.i)
	if err != nil {
		if d.errors == 0 {
			otel.Handle(fmt.Errorf("hostshare: %s (%s): %w", d.dev.ID, d.dev.Name, err))
		}
		d.errors++
		d.stale = true
		return 0, false
	}
	st, err := d.tr.Advance(raw, now)
	if err != nil {
		d.errors++
		d.stale = true
		return 0, false
	}
	return st.Delta, true
}

// Observe exports every domain's figures on in's instruments, then ends
// the series of the processes that ended since the previous Observe. An
// emissions series has the attributes of the energy series it converts.
func (h *Host) Observe(o metric.Observer, in Instruments) {
	j := func(mj uint64) float64 { return float64(mj) / 1000 }
	g := func(ug uint64) float64 { return float64(ug) / 1e6 }
	co2e := in.ProcessCo2e != nil && in.Co2eUnattributed != nil
	for _, d := range h.domains {
		o.ObserveFloat64(in.Energy, j(d.energy), d.hwOpt)
		o.ObserveFloat64(in.Idle, j(d.idle), d.idOpt)
		o.ObserveFloat64(in.Unattributed, j(d.unattr), d.idOpt)
		o.ObserveFloat64(in.Process, j(d.exited), d.exOpt)
		if co2e {
			o.ObserveFloat64(in.Co2eUnattributed, g(d.co2eRest), d.idOpt)
			o.ObserveFloat64(in.ProcessCo2e, g(d.co2eExited), d.exOpt)
		}
	}
	for _, d := range h.whole {
		o.ObserveFloat64(in.HostEnergy, j(d.energy), d.hwOpt)
	}
	for k, s := range h.procs {
		if s.opts == nil {
			s.opts = make([]metric.ObserveOption, len(h.domains))
			for di, d := range h.domains {
				attrs := append([]attribute.KeyValue{semconv.HwID(d.dev.ID), semconv.HwTypeKey.String(d.dev.HWType())}, s.attrs...)
				s.opts[di] = metric.WithAttributeSet(attribute.NewSet(attrs...))
			}
		}
		for di := range h.domains {
			o.ObserveFloat64(in.Process, j(s.mj[di]), s.opts[di])
			if co2e {
				o.ObserveFloat64(in.ProcessCo2e, g(s.ug[di]), s.opts[di])
			}
		}
		if s.exiting {
			for di, d := range h.domains {
				d.exited += s.mj[di]
				d.co2eExited += s.ug[di]
			}
			delete(h.procs, k)
		}
	}
}

// Totals are one domain's cumulative figures, in millijoules, and its
// emissions, in µg CO2e (zero without [Emissions]).
type Totals struct {
	Device                                     otelenergy.Device
	EnergyMJ, IdleMJ, UnattributedMJ, ExitedMJ uint64
	// Processes maps each live or ending process series to its total,
	// and ProcessesUG to its emissions.
	Processes, ProcessesUG map[Process]uint64
	// RestUG is the emissions of idle and unattributed energy, ExitedUG
	// those of the exited series.
	RestUG, ExitedUG uint64
	// ReadErrors counts the counter's failed reads.
	ReadErrors uint64
}

// Process names a process series.
type Process struct {
	Pid       uint32
	StartTime uint64
}

// Totals returns split domain i's figures; for tests and diagnostics.
func (h *Host) Totals(i int) Totals {
	d := h.domains[i]
	t := Totals{Device: d.dev, EnergyMJ: d.energy, IdleMJ: d.idle, UnattributedMJ: d.unattr, ExitedMJ: d.exited,
		RestUG: d.co2eRest, ExitedUG: d.co2eExited,
		ReadErrors: d.errors, Processes: map[Process]uint64{}, ProcessesUG: map[Process]uint64{}}
	for _, s := range h.procs {
		t.Processes[Process{s.pid, s.start}] = s.mj[i]
		t.ProcessesUG[Process{s.pid, s.start}] = s.ug[i]
	}
	return t
}

// WholeEnergyMJ returns whole-host domain i's energy.
func (h *Host) WholeEnergyMJ(i int) uint64 { return h.whole[i].energy }
