package otelenergy

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/hwconv"

	"github.com/otelenergy/otelenergy/internal/genai"
	"github.com/otelenergy/otelenergy/ring"
)

// requestEnergyBuckets are the request-energy histogram's bounds in J: a
// short chat turn costs tens of joules on a data-centre GPU, a long
// generation thousands.
var requestEnergyBuckets = []float64{0.1, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}

// instruments are a Monitor's process-cumulative instruments. Attribute
// sets and observe options are built once; the callback does no attribute
// work and allocates nothing per device.
type instruments struct {
	m   *Monitor
	reg metric.Registration

	energy, unattributed, other                  metric.Float64ObservableCounter
	power, perToken, age, duration, period, coef metric.Float64ObservableGauge
	tokens, errs, anomalies, rejected, dropped   metric.Int64ObservableCounter
	processes                                    metric.Int64ObservableGauge
	requestEnergy                                metric.Float64Histogram
	genai                                        *genai.Server // with WithGenAIMetrics

	devOpts, idOpts         []metric.ObserveOption
	anomalyOpts             [][4]metric.ObserveOption
	outOpt, inOpt, liveOpt  metric.ObserveOption
	capacityOpt, expiredOpt metric.ObserveOption
	coefOpts                [7]metric.ObserveOption
}

func deviceAttrs(d Device) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.HwID(d.ID),
		semconv.HwTypeKey.String(d.HWType()),
		semconv.HwName(d.Name),
		semconv.HwVendor(d.Vendor),
	}
}

func newInstruments(m *Monitor) (*instruments, error) {
	meter := m.cfg.meterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	set := func(kv ...attribute.KeyValue) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(kv...))
	}
	in := &instruments{
		m:           m,
		outOpt:      set(tokenTypeKey.String("output")),
		inOpt:       set(tokenTypeKey.String("input")),
		liveOpt:     set(windowKey.String("live")),
		capacityOpt: set(reasonKey.String("capacity")),
		expiredOpt:  set(reasonKey.String("expired")),
	}
	for i, c := range []string{"static_power", "output_token_energy", "prefill_power", "prefill_busy_power", "input_token_energy", "decode_busy_power", "decode_power"} {
		in.coefOpts[i] = set(coefficientKey.String(c))
	}
	for _, d := range m.devs {
		id := semconv.HwID(d.ID)
		in.devOpts = append(in.devOpts, set(deviceAttrs(d.Device)...))
		in.idOpts = append(in.idOpts, set(id))
		var a [4]metric.ObserveOption
		for k, kind := range []string{"wrap", "reset", "jitter", "glitch"} {
			a[k] = set(id, anomalyKey.String(kind))
		}
		in.anomalyOpts = append(in.anomalyOpts, a)
	}
	var errs []error
	fc := func(name, unit, desc string) metric.Float64ObservableCounter {
		i, err := meter.Float64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	fg := func(name, unit, desc string) metric.Float64ObservableGauge {
		i, err := meter.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	ic := func(name, unit, desc string) metric.Int64ObservableCounter {
		i, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	in.energy = fc("hw.energy", hwconv.Energy{}.Unit(),
		"Energy consumed by the device, from its cumulative energy counter; never decreases across counter resets, wraps or runs.")
	in.power = fg("hw.power", hwconv.Power{}.Unit(),
		"Mean power of the device over the live window, derived from energy counter steps.")
	in.tokens = ic("otelenergy.tokens", "{token}", "Tokens reported by the application.")
	in.perToken = fg("otelenergy.energy_per_token", "J/{token}",
		"Energy per output token over the live window and over the current run; absent when no tokens were produced.")
	in.errs = ic("otelenergy.sampler.errors", "{error}", "Failed energy counter reads.")
	in.anomalies = ic("otelenergy.sampler.anomalies", "{reading}",
		"Counter readings that were not a plain step forward: wraps and resets (charged), jitter and glitches (not charged beyond what the device's power allows).")
	in.age = fg("otelenergy.sampler.age", "s", "Time since the newest energy sample.")
	in.duration = fg("otelenergy.sampler.duration", "s", "Duration of the last sampling pass: every device read plus the ledger's work.")
	in.period = fg("otelenergy.counter.update_period", "s", "The energy counter's update period, as learned from which reads saw it step; absent until learned.")
	in.unattributed = fc("otelenergy.energy.unattributed", "J",
		"Metered energy attributed to no request: time with no active request, and tokens no tracked request reported.")
	in.other = fc("otelenergy.energy.other_processes", "J",
		"Energy of shared devices that belongs to other processes, by their share of the device's SM utilization.")
	in.rejected = ic("otelenergy.tokens.rejected", "{report}", "Token reports rejected for a negative or absurd count.")
	in.dropped = ic("otelenergy.requests.dropped", "{request}",
		"Requests the ledger could not attribute fully: beyond its capacity, or not ended within the maximum age.")
	in.coef = fg("otelenergy.ledger.coefficient", "1",
		"The ledger's learned energy model, summed over devices: static_power, prefill_power, prefill_busy_power, decode_busy_power and decode_power in W, output_token_energy and input_token_energy in J per token.")
	var err error
	in.processes, err = meter.Int64ObservableGauge("otelenergy.device.processes", metric.WithUnit("{process}"),
		metric.WithDescription("Compute processes on the device at the source's latest listing."))
	errs = append(errs, err)
	in.requestEnergy, err = meter.Float64Histogram("otelenergy.request.energy",
		metric.WithUnit("J"),
		metric.WithDescription("Energy attributed to each request once final, recorded in the request's span context so exemplars link to its trace."),
		metric.WithExplicitBucketBoundaries(requestEnergyBuckets...))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if m.cfg.genaiOp != "" {
		s := genai.NewServer(meter)
		in.genai = &s
	}
	in.reg, err = meter.RegisterCallback(in.observe,
		in.energy, in.power, in.tokens, in.perToken, in.errs, in.anomalies, in.age, in.duration, in.period,
		in.unattributed, in.other, in.rejected, in.dropped, in.coef, in.processes)
	if err != nil {
		return nil, err
	}
	return in, nil
}

func (in *instruments) unregister() error {
	if in.reg == nil {
		return nil
	}
	return in.reg.Unregister()
}

func (in *instruments) observe(_ context.Context, o metric.Observer) error {
	m := in.m
	window := int64(defaultLiveWindow)
	var liveE uint64
	for i, d := range m.devs {
		o.ObserveFloat64(in.energy, float64(d.acc.Total())/1000, in.devOpts[i])
		if w, ok := liveWindow(d.ring, window); ok {
			if watts, ok := w.Watts(); ok {
				o.ObserveFloat64(in.power, watts, in.devOpts[i])
			}
			liveE += w.EnergyMJ()
		}
		o.ObserveInt64(in.errs, int64(d.errors.Load()), in.idOpts[i])
		a := &in.anomalyOpts[i]
		o.ObserveInt64(in.anomalies, int64(d.acc.Wraps()), a[0])
		o.ObserveInt64(in.anomalies, int64(d.acc.Resets()), a[1])
		o.ObserveInt64(in.anomalies, int64(d.acc.Jitters()), a[2])
		o.ObserveInt64(in.anomalies, int64(d.acc.Glitches()), a[3])
		if p := d.period.Load(); p > 0 {
			o.ObserveFloat64(in.period, time.Duration(p).Seconds(), in.idOpts[i])
		}
		if s := d.share.Load(); s != nil && s.Processes >= 0 {
			o.ObserveInt64(in.processes, int64(s.Processes), in.idOpts[i])
		}
	}
	// Tokens as of the last sample, like the energy above: the sampler
	// sums them from the requests' own counters.
	outTok, inTok := m.tokens()
	o.ObserveInt64(in.tokens, int64(outTok), in.outOpt)
	o.ObserveInt64(in.tokens, int64(inTok), in.inOpt)
	o.ObserveFloat64(in.unattributed, float64(m.ledger.Unattributed())/1000)
	o.ObserveFloat64(in.other, float64(m.ledger.OtherProcesses())/1000)
	o.ObserveInt64(in.rejected, int64(m.rejected.Load()))
	o.ObserveInt64(in.dropped, int64(m.ledger.Dropped()), in.capacityOpt)
	o.ObserveInt64(in.dropped, int64(m.ledger.Expired()), in.expiredOpt)
	c := m.ledger.Coefficients()
	for i, v := range [7]float64{c.StaticW, c.OutputJ, c.PrefillW, c.PrefillBusyW, c.InputJ, c.DecodeBusyW, c.DecodeW} {
		o.ObserveFloat64(in.coef, v, in.coefOpts[i])
	}
	if last := m.lastSample.Load(); last >= 0 {
		o.ObserveFloat64(in.age, time.Duration(m.now()-last).Seconds())
		o.ObserveFloat64(in.duration, time.Duration(m.sampleNanos.Load()).Seconds())
	}
	// Tokens ride on the first device's steps; its window spans the same
	// time as every device's.
	if w, ok := liveWindow(m.devs[0].ring, window); ok {
		if jpt, ok := ring.JoulesPerToken(liveE, w.Tokens()); ok {
			o.ObserveFloat64(in.perToken, jpt, in.liveOpt)
		}
	}
	ri := m.run.Load()
	base := ri.run.Baseline()
	cur := m.snapshot(-1)
	if jpt, ok := ring.JoulesPerToken(satSub(cur.TotalEnergyMJ(), base.TotalEnergyMJ()), satSub(cur.OutputTokens, base.OutputTokens)); ok {
		o.ObserveFloat64(in.perToken, jpt, ri.jptOpt)
	}
	return nil
}

// liveWindow returns the ring's last window of the given length, ending at
// its newest point.
func liveWindow(r *ring.Ring, window int64) (ring.Window, bool) {
	newest, ok := r.Back(0)
	if !ok {
		return ring.Window{}, false
	}
	return r.Window(newest.T-window, newest.T)
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
