package otelenergy

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/ring"
	"github.com/otelenergy/otelenergy/runscope"
)

// RegisterRunMetrics registers run-scoped instruments for run on mp and
// returns their registration.
//
// The values are run's own view, cumulative − baseline, so they start at
// zero when the run begins: otelenergy.run.energy (J, per GPU),
// otelenergy.run.tokens ({token}, by gen_ai.token.type),
// otelenergy.run.energy.unattributed (J) and
// otelenergy.run.energy_per_token (J/{token}). Once the run has ended they
// hold its final values, so shutting mp down after [Monitor.BeginRun]
// exports them one last time.
//
// mp is meant to be a MeterProvider built for this run, whose resource
// includes [runscope.Run.Resource]: a provider's resource cannot change, and
// its cumulative start time is then the run's start. The process-cumulative
// instruments stay on the Monitor's own provider and never go backwards.
func (m *Monitor) RegisterRunMetrics(mp metric.MeterProvider, run *runscope.Run) (metric.Registration, error) {
	meter := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	energy, err1 := meter.Float64ObservableCounter(MetricRunEnergy, metric.WithUnit("J"),
		metric.WithDescription("GPU energy consumed since the run began."))
	tokens, err2 := meter.Int64ObservableCounter(MetricRunTokens, metric.WithUnit("{token}"),
		metric.WithDescription("Tokens reported since the run began."))
	unattr, err3 := meter.Float64ObservableCounter(MetricRunUnattributed, metric.WithUnit("J"),
		metric.WithDescription("Energy attributed to no request since the run began."))
	perToken, err4 := meter.Float64ObservableGauge(MetricRunEnergyPerTokn, metric.WithUnit("J/{token}"),
		metric.WithDescription("GPU energy per output token since the run began; absent before its first token."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, err
	}
	devOpts := make([]metric.ObserveOption, len(m.devs))
	for i, d := range m.devs {
		devOpts[i] = metric.WithAttributeSet(attribute.NewSet(semconv.HwID(d.ID), semconv.HwTypeGpu))
	}
	outOpt := metric.WithAttributeSet(attribute.NewSet(TokenTypeKey.String("output")))
	inOpt := metric.WithAttributeSet(attribute.NewSet(TokenTypeKey.String("input")))
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := run.Since(m.snapshot(-1))
		for i, e := range v.EnergyMJ {
			o.ObserveFloat64(energy, float64(e)/1000, devOpts[i])
		}
		o.ObserveInt64(tokens, int64(v.OutputTokens), outOpt)
		o.ObserveInt64(tokens, int64(v.InputTokens), inOpt)
		o.ObserveFloat64(unattr, float64(v.UnattributedMJ)/1000)
		if jpt, ok := ring.JoulesPerToken(v.TotalEnergyMJ(), v.OutputTokens); ok {
			o.ObserveFloat64(perToken, jpt)
		}
		return nil
	}, energy, tokens, unattr, perToken)
}
