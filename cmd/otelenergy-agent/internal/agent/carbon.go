package agent

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/attrib"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/hostshare"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
	"github.com/otelenergy/otelenergy/ring"
)

// Attribute keys of the intensity gauge: the figure's source and kind,
// both few and fixed (never a zone or a value).
const (
	CarbonSourceKey = attribute.Key("otelenergy.carbon.source")
	CarbonKindKey   = attribute.Key("otelenergy.carbon.kind")
)

// emissions converts each split interval's energy into emissions through
// the agent's own [carbon.Model], per process, and holds the scratch that
// keeps it allocation-free. Its methods run under the Agent's mutex,
// which serializes Model.Note and Model.Interval as the model requires.
//
// The model's timeline is noted once per pass, at the ring's time, before
// the pass reads the rings: a change the poller published is in force
// from the first pass that saw it, and an interval (a, b] is converted at
// the reading in force at b, whenever it is split (an interval held for
// its utilization samples keeps the reading it was metered at). One
// interval has one intensity, so a process whose intervals span a change
// gets each at its own.
//
// The host's RAPL domains are converted through the same model, in the
// same pass, on the same goroutine (see Convert).
type emissions struct {
	model *carbon.Model
	age   func() (time.Duration, bool)
	// passT is the ring's time the current pass noted the model at, and
	// prevT the previous pass's (New's for the first pass).
	passT, prevT int64

	shares, cover, op, emb []uint64
	even                   []uint64  // shareTime's scratch
	targets                []*series // nil: no series, the rest
	runOut                 []uint64

	process, rest metric.Float64ObservableCounter
	intensity     metric.Float64ObservableGauge
	ageGauge      metric.Float64ObservableGauge
	reg           metric.Registration
}

// on reports whether carbon is configured.
func (e *emissions) on() bool { return e.model != nil }

// noteCarbon notes the reading in force at the ring's time now.
func (a *Agent) noteCarbon() {
	if !a.em.on() {
		return
	}
	t, _ := a.clock()
	a.em.model.Note(t)
	a.em.prevT, a.em.passT = a.em.passT, t
}

var _ hostshare.Emissions = (*emissions)(nil)

// Convert is the host's split's [hostshare.Emissions]: Host.Pass calls it
// from the agent's pass, under the Agent's mutex, for each RAPL domain's
// energy since the previous pass, after this pass noted the model.
//
// A domain's energy of a pass is metered over (prevT, passT], the two
// passes' instants on the ring's clock. The model is noted only at
// passes, so over [prevT, passT) one reading is in force, the one noted
// at prevT, and the energy is converted at it, as the board's counter
// steps of the same span are: a change is in force for the host and the
// boards from the same pass on. One pass has one intensity, so per
// domain and pass Σ process µg + rest µg = round(E × I × PUE), and a
// change between passes is integrated pass by pass.
//
// Operational emissions only: the interval given the model is (prevT,
// prevT], of no device time, so it charges no embodied emissions. The
// embodied emissions per device-hour (-embodied-g-per-hour) are the
// accelerator's, charged on each board by its time; charging them on
// every RAPL domain too would count a board's manufacture again per
// package and DRAM, and the CPU's and memory's own embodied emissions are
// not a figure the agent takes.
func (e *emissions) Convert(sharesMJ []uint64, restMJ uint64, ug []uint64) uint64 {
	e.emb = grow(e.emb, len(sharesMJ))
	res := e.model.Interval(e.prevT, e.prevT, sharesMJ, restMJ, nil, ug, e.emb)
	return res.OperationalRest + res.EmbodiedRest
}

// convert converts one interval (a, b] of board b, whose energy went
// sharesMJ[k] to targets[k] (nil: to no series) and restMJ to idle and
// unattributed, and adds each target's µg to its series and the rest's
// to the board's. Embodied emissions are charged by device time: the
// interval's time is shared equally among the targets with a share
// (procshare.Cover), and is the rest's when none has one.
func (e *emissions) convert(bd *board, a, b int64, restMJ uint64) {
	n := len(e.shares)
	e.cover = grow(e.cover, n)
	var dt uint64
	if b > a {
		dt = uint64(b - a)
	}
	e.even = procshare.Cover(dt, e.shares, e.cover, e.even)
	e.convertCover(bd, a, b, restMJ, e.cover)
}

// convertCover is convert with each target's device time given.
func (e *emissions) convertCover(bd *board, a, b int64, restMJ uint64, cover []uint64) {
	n := len(e.shares)
	e.op, e.emb = grow(e.op, n), grow(e.emb, n)
	res := e.model.Interval(a, b, e.shares, restMJ, cover, e.op, e.emb)
	bd.co2eRestUG += res.OperationalRest + res.EmbodiedRest
	for k, s := range e.targets {
		ug := e.op[k] + e.emb[k]
		if s == nil {
			bd.co2eRestUG += ug
		} else {
			s.ug += ug
		}
	}
}

// onSplit is board bd's attrib.Config.OnSplit: it converts one interval
// the aligner split, each share to the series that a.give will give its
// energy to, at the device time the aligner gave each process.
func (a *Agent) onSplit(bd *board) ring.OnSplit[attrib.Proc] {
	return func(_ int, t0, t1 int64, procs []attrib.Proc, mj []uint64, restMJ uint64, cover []uint64) {
		e := &a.em
		e.shares, e.targets = append(e.shares[:0], mj...), e.targets[:0]
		for _, p := range procs {
			e.targets = append(e.targets, bd.seriesFor(p.Pid, p.Key))
		}
		e.convertCover(bd, t0, t1, restMJ, cover)
	}
}

// window is procshare.Window over board b's slots and weights, into
// b.out, with the emissions of its energy: with carbon on, its
// intervals are split in runs that share one reading (almost always one
// run: a reading changes at a pass, every few minutes at most), each run
// converted at its reading.
func (a *Agent) window(b *board, ivs []procshare.Interval, staticW float64, mode procshare.Mode) procshare.Result {
	if !a.em.on() {
		return procshare.Window(ivs, staticW, mode, b.weights, b.out)
	}
	e := &a.em
	var total procshare.Result
	for len(ivs) > 0 {
		n := 1
		first := e.model.Interval(ivs[0].T0, ivs[0].T1, nil, 0, nil, nil, nil).Reading
		for n < len(ivs) && e.model.Interval(ivs[n].T0, ivs[n].T1, nil, 0, nil, nil, nil).Reading == first {
			n++
		}
		run := ivs[:n]
		ivs = ivs[n:]
		e.runOut = grow(e.runOut, len(b.weights))
		clear(e.runOut)
		r := procshare.Window(run, staticW, mode, b.weights, e.runOut)
		total.IdleMJ += r.IdleMJ
		total.UnattributedMJ += r.UnattributedMJ
		total.ActiveMJ += r.ActiveMJ
		total.Shared = total.Shared || r.Shared
		e.shares, e.targets = append(e.shares[:0], e.runOut...), append(e.targets[:0], b.slots...)
		for k, mj := range e.runOut {
			b.out[k] += mj
		}
		e.convert(b, run[0].T0, run[len(run)-1].T1, r.IdleMJ+r.UnattributedMJ)
	}
	return total
}

// grow returns s with length n, reusing its array when it is long enough.
func grow(s []uint64, n int) []uint64 {
	if cap(s) < n {
		return make([]uint64, n, 2*n)
	}
	return s[:n]
}

// register creates the emissions instruments: process.co2e and
// co2e.unattributed, observed in the Agent's callback beside the energy
// they convert, and the intensity gauges, in a callback of their own.
func (e *emissions) register(m metric.Meter) error {
	if !e.on() {
		return nil
	}
	var errs [4]error
	e.process, errs[0] = m.Float64ObservableCounter("otelenergy.process.co2e", metric.WithUnit("g"),
		metric.WithDescription("Each compute process's emissions in g CO2e: its otelenergy.process.energy times the PUE and the grid intensity in force when each interval was metered, plus, on a GPU board, its share of the board's embodied emissions by device time (a RAPL domain's are operational only)."))
	e.rest, errs[1] = m.Float64ObservableCounter("otelenergy.co2e.unattributed", metric.WithUnit("g"),
		metric.WithDescription("The device's emissions that no process was given: those of its idle and unattributed energy, and a board's embodied emissions of the time no process had a share."))
	e.intensity, errs[2] = m.Float64ObservableGauge("otelenergy.carbon.intensity", metric.WithUnit("g/kW.h"),
		metric.WithDescription("The grid carbon intensity in force, with its source and kind (average or marginal); absent while none is."))
	e.ageGauge, errs[3] = m.Float64ObservableGauge("otelenergy.carbon.intensity.age", metric.WithUnit("s"),
		metric.WithDescription("Time since the intensity provider's last good answer; absent for a static intensity and before the first answer."))
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	var err error
	e.reg, err = m.RegisterCallback(e.observeIntensity, e.intensity, e.ageGauge)
	return err
}

func (e *emissions) observeIntensity(_ context.Context, o metric.Observer) error {
	if r := e.model.Current(); r != nil {
		o.ObserveFloat64(e.intensity, r.GramsPerKWh(), metric.WithAttributes(CarbonSourceKey.String(r.Source), CarbonKindKey.String(r.Kind.String())))
	}
	if e.age != nil {
		if d, ok := e.age(); ok {
			o.ObserveFloat64(e.ageGauge, d.Seconds())
		}
	}
	return nil
}

func (e *emissions) unregister() error {
	if e.reg == nil {
		return nil
	}
	return e.reg.Unregister()
}

// observeCarbon exports board b's emissions, with the attributes of the
// energy series they convert; the caller holds the Agent's mutex and
// calls it before it moves the exiting series' totals to the exited one.
func (a *Agent) observeCarbon(o metric.Observer, b *board) {
	e := &a.em
	if !e.on() {
		return
	}
	g := func(ug uint64) float64 { return float64(ug) / 1e6 }
	o.ObserveFloat64(e.rest, g(b.co2eRestUG), b.idOpt)
	o.ObserveFloat64(e.process, g(b.exited.ug), b.exited.opt)
	o.ObserveFloat64(e.process, g(b.overflow.ug), b.overflow.opt)
	for _, s := range b.procs {
		if !s.overflow {
			o.ObserveFloat64(e.process, g(s.ug), s.opt)
		}
	}
	for _, s := range b.exiting {
		o.ObserveFloat64(e.process, g(s.ug), s.opt)
	}
}
