package otelenergy

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/ring"
)

// RunMeterProvider returns a MeterProvider for run, with the run-scoped
// instruments registered on it, and its resource res merged with the run's
// own (otelenergy.run.id, gen_ai.request.model). opts configure the
// provider as for sdkmetric.NewMeterProvider (readers, views); a resource
// among them is replaced. A provider's resource cannot change, so each run
// needs its own; its cumulative start time is then the run's start.
//
// The run-scoped instruments are run's own view, cumulative − baseline, so
// they start at zero when the run begins: otelenergy.run.energy (J, per
// device), otelenergy.run.tokens ({token}, by gen_ai.token.type),
// otelenergy.run.energy.unattributed (J) and
// otelenergy.run.energy_per_token (J/{token}). Once the run has ended they
// hold its final values, so shutting the provider down after the next
// [Monitor.BeginRun] exports them one last time:
//
//	run := mon.BeginRun("llama-3.1-8b")
//	mp, err := mon.RunMeterProvider(run, res, sdkmetric.WithReader(reader))
//	// ... at the next swap: mp.Shutdown(ctx)
//
// The process-cumulative instruments stay on the Monitor's own provider
// and never go backwards. It fails with [ErrClosed] on a nil Monitor, and
// with an error wrapping [ErrInvalidConfig] when the resources cannot be
// merged.
func (m *Monitor) RunMeterProvider(run *Run, res *resource.Resource, opts ...sdkmetric.Option) (*sdkmetric.MeterProvider, error) {
	if m == nil {
		return nil, ErrClosed
	}
	if run == nil {
		return nil, fmt.Errorf("%w: nil run", ErrInvalidConfig)
	}
	merged, err := resource.Merge(res, run.Resource())
	if err != nil {
		return nil, fmt.Errorf("%w: run resource: %w", ErrInvalidConfig, err)
	}
	mp := sdkmetric.NewMeterProvider(append(opts, sdkmetric.WithResource(merged))...)
	if err := m.registerRunMetrics(mp, run); err != nil {
		return nil, errors.Join(err, mp.Shutdown(context.Background()))
	}
	return mp, nil
}

func (m *Monitor) registerRunMetrics(mp metric.MeterProvider, run *Run) error {
	meter := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	energy, err1 := meter.Float64ObservableCounter("otelenergy.run.energy", metric.WithUnit("J"),
		metric.WithDescription("Device energy consumed since the run began."))
	tokens, err2 := meter.Int64ObservableCounter("otelenergy.run.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens reported since the run began."))
	unattr, err3 := meter.Float64ObservableCounter("otelenergy.run.energy.unattributed", metric.WithUnit("J"),
		metric.WithDescription("Energy attributed to no request since the run began."))
	perToken, err4 := meter.Float64ObservableGauge("otelenergy.run.energy_per_token", metric.WithUnit("J/{token}"),
		metric.WithDescription("Device energy per output token since the run began; absent before its first token."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	devOpts := make([]metric.ObserveOption, len(m.devs))
	for i, d := range m.devs {
		devOpts[i] = metric.WithAttributeSet(attribute.NewSet(semconv.HwID(d.ID), semconv.HwTypeKey.String(d.HWType())))
	}
	outOpt := metric.WithAttributeSet(attribute.NewSet(tokenTypeKey.String("output")))
	inOpt := metric.WithAttributeSet(attribute.NewSet(tokenTypeKey.String("input")))
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
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
	return err
}
