package otelenergy

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/hwconv"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/internal/genai"
	"github.com/otelenergy/otelenergy/ring"
)

// requestEnergyBuckets are the request-energy histogram's bounds in J: a
// short chat turn costs tens of joules on a data-centre GPU, a long
// generation thousands.
var requestEnergyBuckets = []float64{0.1, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}

// requestCo2eBuckets are the request-emissions histogram's bounds in g
// CO2e: those energies at 50 to 700 g/kWh (1 J at 400 g/kWh is 0.11 mg).
var requestCo2eBuckets = []float64{1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

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

	// With WithCarbon; the ages and fetch errors only when the model
	// reads a *carbon.Poller.
	requestCo2e                     metric.Float64Histogram
	intensity, intensityAge, figAge metric.Float64ObservableGauge
	co2Unattributed                 metric.Float64ObservableCounter
	fetchErrors                     metric.Int64ObservableCounter
	poller                          *carbon.Poller

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
	observed := []metric.Observable{in.energy, in.power, in.tokens, in.perToken, in.errs, in.anomalies, in.age, in.duration, in.period,
		in.unattributed, in.other, in.rejected, in.dropped, in.coef, in.processes}
	if c := m.co2; c != nil {
		in.requestCo2e, err = meter.Float64Histogram("otelenergy.request.co2e",
			metric.WithUnit("g"),
			metric.WithDescription("Emissions (CO2e) of each request's energy once final, times the PUE and the grid intensity in force when each of its intervals was metered, plus its share of embodied emissions; recorded in the request's span context."),
			metric.WithExplicitBucketBoundaries(requestCo2eBuckets...))
		errs = append(errs, err)
		in.intensity = fg("otelenergy.carbon.intensity", "g/kW.h",
			"Grid carbon intensity in force, as its source gives it (before the PUE); absent while none is.")
		in.co2Unattributed = fc("otelenergy.co2e.unattributed", "g",
			"Emissions (CO2e) attributed to no request: of unattributed energy, of other processes' share of shared devices, and the embodied emissions of idle device time.")
		observed = append(observed, in.intensity, in.co2Unattributed)
		if pl, ok := c.model.Reader().(*carbon.Poller); ok {
			in.poller = pl
			in.intensityAge = fg("otelenergy.carbon.intensity.age", "s",
				"Time since the intensity provider's last good answer; absent before the first.")
			in.figAge = fg("otelenergy.carbon.intensity.figure_age", "s",
				"How long ago the period the provider's last figure describes ended (0 while it runs); absent before the first figure or for one with no time.")
			in.fetchErrors = ic("otelenergy.carbon.fetch_errors", "{error}", "Failed fetches of the carbon intensity.")
			observed = append(observed, in.intensityAge, in.figAge, in.fetchErrors)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if m.cfg.genaiOp != "" {
		s := genai.NewServer(meter)
		in.genai = &s
	}
	in.reg, err = meter.RegisterCallback(in.observe, observed...)
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
	if c := m.co2; c != nil {
		in.observeCarbon(c, o)
	}
	return nil
}

func (in *instruments) observeCarbon(c *co2State, o metric.Observer) {
	if r := c.model.Current(); r != nil {
		o.ObserveFloat64(in.intensity, r.GramsPerKWh(), c.gaugeOpt(r))
	}
	o.ObserveFloat64(in.co2Unattributed, float64(c.unattributed.Load())/1e6)
	if pl := in.poller; pl != nil {
		if age, ok := pl.Age(); ok {
			o.ObserveFloat64(in.intensityAge, age.Seconds())
		}
		if age, ok := pl.FigureAge(); ok {
			o.ObserveFloat64(in.figAge, age.Seconds())
		}
		o.ObserveInt64(in.fetchErrors, int64(pl.Failures()))
	}
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
