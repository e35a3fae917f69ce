package proxy

import (
	"context"
	"errors"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/otelenergy/otelenergy/internal/otelenv"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// serviceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise.
const serviceName = "otelenergy-proxy"

// sourceKey is the resource attribute naming the energy source, as
// otelenergy.Monitor.Resource sets it: nvml or simulated.
const sourceKey = attribute.Key("otelenergy.source")

// telemetry holds the proxy's providers. Exporters come from contrib's
// autoexport, so the standard variables choose them; with no exporter
// variable and no OTLP endpoint set, nothing is exported.
type telemetry struct {
	res    *resource.Resource
	mp     *sdkmetric.MeterProvider
	tp     *sdktrace.TracerProvider
	prop   propagation.TextMapPropagator
	traces sdktrace.SpanExporter // nil when traces are not exported
}

// newTelemetry builds the providers; lookupEnv decides whether exporters
// are wanted (autoexport itself then reads the process's environment).
func newTelemetry(ctx context.Context, sourceKind string, lookupEnv func(string) (string, bool)) (*telemetry, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName), sourceKey.String(sourceKind)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, err
	}
	t := &telemetry{res: res, prop: autoprop.NewTextMapPropagator()}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if otelenv.WantedIn(lookupEnv, "METRICS") {
		rd, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, err
		}
		mopts = append(mopts, sdkmetric.WithReader(rd))
	}
	t.mp = sdkmetric.NewMeterProvider(mopts...)
	if otelenv.WantedIn(lookupEnv, "TRACES") {
		if t.traces, err = autoexport.NewSpanExporter(ctx); err != nil {
			t.mp.Shutdown(ctx)
			return nil, err
		}
	}
	return t, nil
}

// startTraces builds the TracerProvider, whose exporter needs the Monitor
// to replace each span's estimate with its final figure.
func (t *telemetry) startTraces(mon *otelenergy.Monitor) {
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(t.res)}
	if t.traces != nil {
		opts = append(opts, sdktrace.WithBatcher(otelenergy.NewSpanExporter(t.traces, mon)))
	}
	t.tp = sdktrace.NewTracerProvider(opts...)
}

func (t *telemetry) flushTraces(ctx context.Context) error {
	if t.tp == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// shutdownMetrics flushes and stops the metrics, and the trace exporter
// when no TracerProvider took it over.
func (t *telemetry) shutdownMetrics(ctx context.Context) error {
	var errs []error
	if t.tp == nil && t.traces != nil {
		errs = append(errs, t.traces.Shutdown(ctx))
	}
	return errors.Join(append(errs, t.mp.Shutdown(ctx))...)
}
