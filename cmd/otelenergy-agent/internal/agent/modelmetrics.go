package agent

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/attrib"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
)

// Attribute keys of the model gauges.
const (
	TermKey       = attribute.Key("otelenergy.power_model.term")
	IdleSourceKey = attribute.Key("otelenergy.idle.source")
)

// modelInstruments are the gauges of each board's power model and idle
// power, which doctor reads: how far the split can be trusted.
type modelInstruments struct {
	reg                 metric.Registration
	coefficient, rows   metric.Float64ObservableGauge
	idlePower, idleData metric.Float64ObservableGauge
}

// modelOpts are one board's prebuilt attribute sets, so that observing
// allocates nothing.
type modelOpts struct {
	term [attrib.NumTerms]metric.ObserveOption
	idle [len(attrib.IdleSourceNames)]metric.ObserveOption
}

func newModelOpts(hwID string) modelOpts {
	var o modelOpts
	id := semconv.HwID(hwID)
	for t, name := range attrib.TermNames {
		o.term[t] = metric.WithAttributeSet(attribute.NewSet(id, TermKey.String(name)))
	}
	for s, name := range attrib.IdleSourceNames {
		o.idle[s] = metric.WithAttributeSet(attribute.NewSet(id, IdleSourceKey.String(name)))
	}
	return o
}

func (in *modelInstruments) register(a *Agent, m metric.Meter) error {
	var errs [4]error
	in.coefficient, errs[0] = m.Float64ObservableGauge("otelenergy.agent.power_model.coefficient", metric.WithUnit("W"),
		metric.WithDescription("Each board's learned power model: its static power, and the power of each utilization term at 100 % summed over its processes (sm: SM time memory does not overlap; sm_memory: SM time memory overlaps; memory: memory time beyond SM; encoder; decoder); the active energy is split by each process's modelled power once the model is learned."))
	in.rows, errs[1] = m.Float64ObservableGauge("otelenergy.agent.power_model.data", metric.WithUnit("s"),
		metric.WithDescription("The data behind each board's power model: its effective number of one-second rows after forgetting."))
	in.idlePower, errs[2] = m.Float64ObservableGauge("otelenergy.agent.idle.power", metric.WithUnit("W"),
		metric.WithDescription("Each board's idle power as the split uses it, labelled by its source: the board's idle intervals, the power model's static term, identical boards' idle intervals, -idle-watts, or none."))
	in.idleData, errs[3] = m.Float64ObservableGauge("otelenergy.agent.idle.data", metric.WithUnit("s"),
		metric.WithDescription("The data behind each board's idle power after forgetting: seconds of idle intervals, or model rows; 0 for a borrowed, fixed or unknown idle power."))
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	var err error
	in.reg, err = m.RegisterCallback(a.observeModel, in.coefficient, in.rows, in.idlePower, in.idleData)
	return err
}

func (in *modelInstruments) unregister() error {
	if in.reg == nil {
		return nil
	}
	return in.reg.Unregister()
}

// observeModel exports every measured board's model and idle power, and
// the idle power of every board without per-process utilization (MIG,
// vGPU), which has no model.
func (a *Agent) observeModel(_ context.Context, o metric.Observer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	in := &a.inst.model
	for _, b := range a.boards {
		if b.lost {
			continue
		}
		if b.shared {
			w, src, sec := staticIdle(&b.static)
			o.ObserveFloat64(in.idlePower, w, b.modelOpts.idle[src])
			o.ObserveFloat64(in.idleData, sec, b.modelOpts.idle[src])
			continue
		}
		theta, _ := b.att.Model()
		for t := range theta {
			o.ObserveFloat64(in.coefficient, theta[t], b.modelOpts.term[t])
		}
		o.ObserveFloat64(in.rows, b.att.ModelRows(), b.idOpt)
		w, src, sec := b.att.Idle()
		o.ObserveFloat64(in.idlePower, w, b.modelOpts.idle[src])
		o.ObserveFloat64(in.idleData, sec, b.modelOpts.idle[src])
	}
	return nil
}

// staticIdle is the idle power of a board without per-process
// utilization, where it comes from, and the seconds behind it, as
// attrib.Board.Idle gives a measured board's: fixed, its idle windows,
// or the intercept of its fit (IdleModel).
func staticIdle(s *procshare.Static) (watts float64, src attrib.IdleSource, seconds float64) {
	w := s.Watts()
	sec, measured := s.Measured()
	switch {
	case s.Fixed > 0:
		return w, attrib.IdleFixed, 0
	case measured:
		return w, attrib.IdleIntervals, sec
	case w > 0:
		return w, attrib.IdleModel, 0
	}
	return 0, attrib.IdleNone, 0
}
