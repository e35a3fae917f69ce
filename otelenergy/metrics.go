package otelenergy

import (
	"context"
	"errors"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/hwconv"

	"github.com/otelenergy/otelenergy/ring"
)

// Instrument names this package registers. The hw.* names are the hardware
// semantic conventions'; docs/metrics.md documents every instrument.
const (
	MetricEnergy           = "hw.energy"
	MetricPower            = "hw.power"
	MetricTokens           = "otelenergy.tokens"
	MetricEnergyPerToken   = "otelenergy.energy_per_token"
	MetricSamplerErrors    = "otelenergy.sampler.errors"
	MetricSamplerAge       = "otelenergy.sampler.age"
	MetricUnattributed     = "otelenergy.energy.unattributed"
	MetricRejectedTokens   = "otelenergy.tokens.rejected"
	MetricRequestEnergy    = "otelenergy.request.energy"
	MetricRunEnergy        = "otelenergy.run.energy"
	MetricRunTokens        = "otelenergy.run.tokens"
	MetricRunUnattributed  = "otelenergy.run.energy.unattributed"
	MetricRunEnergyPerTokn = "otelenergy.run.energy_per_token"
)

// requestEnergyBuckets are the request-energy histogram's bounds in J: a
// short chat turn costs tens of joules on a data-centre GPU, a long
// generation thousands.
var requestEnergyBuckets = []float64{0.1, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}

// instruments are a Monitor's process-cumulative instruments. Attribute
// sets and observe options are built once; the callback does no attribute
// work.
type instruments struct {
	m   *Monitor
	reg metric.Registration

	energy        metric.Float64ObservableCounter
	power         metric.Float64ObservableGauge
	tokens        metric.Int64ObservableCounter
	perToken      metric.Float64ObservableGauge
	errs          metric.Int64ObservableCounter
	age           metric.Float64ObservableGauge
	unattributed  metric.Float64ObservableCounter
	rejected      metric.Int64ObservableCounter
	requestEnergy metric.Float64Histogram

	devOpts   []metric.ObserveOption
	outOpt    metric.ObserveOption
	inOpt     metric.ObserveOption
	liveOpt   metric.ObserveOption
	errorOpts []metric.ObserveOption
}

func deviceAttrs(d Device) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.HwID(d.ID),
		semconv.HwTypeGpu,
		semconv.HwName(d.Name),
		semconv.HwVendor(d.Vendor),
	}
}

func newInstruments(m *Monitor) (*instruments, error) {
	meter := m.cfg.meterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	in := &instruments{
		m:       m,
		outOpt:  metric.WithAttributeSet(attribute.NewSet(TokenTypeKey.String("output"))),
		inOpt:   metric.WithAttributeSet(attribute.NewSet(TokenTypeKey.String("input"))),
		liveOpt: metric.WithAttributeSet(attribute.NewSet(WindowKey.String("live"))),
	}
	for _, d := range m.devs {
		in.devOpts = append(in.devOpts, metric.WithAttributeSet(attribute.NewSet(deviceAttrs(d.Device)...)))
		in.errorOpts = append(in.errorOpts, metric.WithAttributeSet(attribute.NewSet(semconv.HwID(d.ID))))
	}
	var err, e error
	in.energy, e = meter.Float64ObservableCounter(MetricEnergy,
		metric.WithUnit(hwconv.Energy{}.Unit()),
		metric.WithDescription("Energy consumed by the GPU, from its cumulative energy counter; never decreases across counter resets, wraps or runs."))
	err = errors.Join(err, e)
	in.power, e = meter.Float64ObservableGauge(MetricPower,
		metric.WithUnit(hwconv.Power{}.Unit()),
		metric.WithDescription("Mean power of the GPU over the live window, derived from energy counter deltas."))
	err = errors.Join(err, e)
	in.tokens, e = meter.Int64ObservableCounter(MetricTokens,
		metric.WithUnit("{token}"),
		metric.WithDescription("Tokens reported by the application."))
	err = errors.Join(err, e)
	in.perToken, e = meter.Float64ObservableGauge(MetricEnergyPerToken,
		metric.WithUnit("J/{token}"),
		metric.WithDescription("GPU energy per output token over the live window and over the current run; absent when no tokens were produced."))
	err = errors.Join(err, e)
	in.errs, e = meter.Int64ObservableCounter(MetricSamplerErrors,
		metric.WithUnit("{error}"),
		metric.WithDescription("Failed energy counter reads."))
	err = errors.Join(err, e)
	in.age, e = meter.Float64ObservableGauge(MetricSamplerAge,
		metric.WithUnit("s"),
		metric.WithDescription("Age of the newest energy sample."))
	err = errors.Join(err, e)
	in.unattributed, e = meter.Float64ObservableCounter(MetricUnattributed,
		metric.WithUnit("J"),
		metric.WithDescription("Metered energy attributed to no request: intervals with no tokens and no active request, and tokens no tracked request reported."))
	err = errors.Join(err, e)
	in.rejected, e = meter.Int64ObservableCounter(MetricRejectedTokens,
		metric.WithUnit("{report}"),
		metric.WithDescription("Token reports rejected for a negative or absurd count."))
	err = errors.Join(err, e)
	in.requestEnergy, e = meter.Float64Histogram(MetricRequestEnergy,
		metric.WithUnit("J"),
		metric.WithDescription("Energy attributed to each request, recorded in the request's context so exemplars link to its trace."),
		metric.WithExplicitBucketBoundaries(requestEnergyBuckets...))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	in.reg, err = meter.RegisterCallback(in.observe,
		in.energy, in.power, in.tokens, in.perToken, in.errs, in.age, in.unattributed, in.rejected)
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
	for i, d := range m.devs {
		o.ObserveFloat64(in.energy, float64(d.acc.Total())/1000, in.devOpts[i])
		if w := math.Float64frombits(d.power.Load()); !math.IsNaN(w) {
			o.ObserveFloat64(in.power, w, in.devOpts[i])
		}
		o.ObserveInt64(in.errs, int64(d.errors.Load()), in.errorOpts[i])
	}
	o.ObserveInt64(in.tokens, int64(m.outTokens.Load()), in.outOpt)
	o.ObserveInt64(in.tokens, int64(m.inTokens.Load()), in.inOpt)
	o.ObserveFloat64(in.unattributed, float64(m.unattributedMJ())/1000)
	o.ObserveInt64(in.rejected, int64(m.rejected.Load()))

	newest, ok := m.ring.Back(0)
	if !ok {
		return nil
	}
	o.ObserveFloat64(in.age, time.Duration(m.now()-newest.T).Seconds())
	if start, ok := m.ring.AtOrBefore(newest.T - int64(m.cfg.liveWindow)); ok {
		if jpt, ok := (ring.Window{Start: start, End: newest}).JoulesPerToken(); ok {
			o.ObserveFloat64(in.perToken, jpt, in.liveOpt)
		}
	}
	ri := m.run.Load()
	base := ri.run.Baseline()
	if jpt, ok := ring.JoulesPerToken(satSub(newest.EnergyMJ, base.TotalEnergyMJ()), satSub(newest.Tokens, base.OutputTokens)); ok {
		o.ObserveFloat64(in.perToken, jpt, ri.jptOpt)
	}
	return nil
}
