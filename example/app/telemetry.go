package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/example/internal/tee"
	"github.com/otelenergy/otelenergy/internal/otelenv"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// telemetry owns the providers. Exporters come from contrib's autoexport,
// so every standard variable works: OTEL_TRACES_EXPORTER and
// OTEL_METRICS_EXPORTER (otlp, console, none, and prometheus for metrics),
// OTEL_EXPORTER_OTLP_PROTOCOL (grpc or http/protobuf) and the rest of
// OTEL_EXPORTER_OTLP_*. When neither names an exporter nor an OTLP endpoint
// is set, the demo exports nothing, so it runs with no collector.
type telemetry struct {
	export        bool // metrics go somewhere
	prometheus    bool // metrics are served on one /metrics endpoint
	res           *resource.Resource
	meterProvider *sdkmetric.MeterProvider
	traceProvider *sdktrace.TracerProvider

	mu    sync.Mutex
	runMP *sdkmetric.MeterProvider // the current run's provider
}

// setupTelemetry builds the providers, with monRes (the Monitor's resource:
// otelenergy.source) merged into the service's resource, and installs them
// as the globals.
func setupTelemetry(ctx context.Context, monRes *resource.Resource) (*telemetry, error) {
	base, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName("otelenergy-example")), monRes)
	if err != nil {
		return nil, err
	}
	res, err := resource.Merge(base, resource.Environment()) // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	if err != nil {
		return nil, err
	}
	t := &telemetry{export: otelenv.Wanted("METRICS"), prometheus: os.Getenv("OTEL_METRICS_EXPORTER") == "prometheus", res: res}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if t.export {
		rd, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, err
		}
		mopts = append(mopts, sdkmetric.WithReader(rd))
		fmt.Printf("exporting metrics (OTEL_METRICS_EXPORTER=%q, OTEL_EXPORTER_OTLP_PROTOCOL=%q)\n",
			os.Getenv("OTEL_METRICS_EXPORTER"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	t.meterProvider = sdkmetric.NewMeterProvider(mopts...)
	otel.SetMeterProvider(t.meterProvider)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return t, nil
}

// startTracing builds the tracer provider. Spans go to the console printer
// and, when exporting, to OTLP, through one otelenergy span exporter so that
// both see each request's exact energy.
func (t *telemetry) startTracing(mon *otelenergy.Monitor) error {
	exps := []sdktrace.SpanExporter{printer{}}
	if otelenv.Wanted("TRACES") {
		exp, err := autoexport.NewSpanExporter(context.Background())
		if err != nil {
			return err
		}
		exps = append(exps, exp)
	}
	var bopts []sdktrace.BatchSpanProcessorOption
	if os.Getenv("OTEL_BSP_SCHEDULE_DELAY") == "" {
		bopts = append(bopts, sdktrace.WithBatchTimeout(500*time.Millisecond))
	}
	t.traceProvider = sdktrace.NewTracerProvider(
		sdktrace.WithResource(t.res),
		sdktrace.WithBatcher(otelenergy.NewSpanExporter(tee.Exporters(exps), mon), bopts...),
	)
	otel.SetTracerProvider(t.traceProvider)
	return nil
}

// beginRunMetrics gives run a MeterProvider of its own whose resource carries
// the run's identity, and retires the previous run's provider after a final
// export of its (now frozen) values. The prometheus exporter serves one
// endpoint, which the process-wide provider holds: with it, the per-run
// instruments are not exported (the run's J/token still is, on the
// process-wide otelenergy.energy_per_token{otelenergy.window="run"}).
func (t *telemetry) beginRunMetrics(ctx context.Context, mon *otelenergy.Monitor, run *otelenergy.Run) error {
	if !t.export || t.prometheus {
		return nil
	}
	rd, err := autoexport.NewMetricReader(ctx)
	if err != nil {
		return err
	}
	mp, err := mon.RunMeterProvider(run, t.res, sdkmetric.WithReader(rd))
	if err != nil {
		return errors.Join(err, rd.Shutdown(ctx))
	}
	t.mu.Lock()
	old := t.runMP
	t.runMP = mp
	t.mu.Unlock()
	if old != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return old.Shutdown(sctx)
	}
	return nil
}

func (t *telemetry) shutdown(ctx context.Context) error {
	t.mu.Lock()
	runMP := t.runMP
	t.mu.Unlock()
	var errs []error
	if t.traceProvider != nil {
		errs = append(errs, finalExport("traces", otelenv.TracesExporter(os.LookupEnv), t.traceProvider.Shutdown(ctx)))
	}
	metrics := otelenv.MetricsExporter(os.LookupEnv)
	if runMP != nil {
		errs = append(errs, finalExport("run metrics", metrics, runMP.Shutdown(ctx)))
	}
	errs = append(errs, finalExport("metrics", metrics, t.meterProvider.Shutdown(ctx)))
	return errors.Join(errs...)
}

// finalExport names the exporter and where it sends in a failed final
// export's error: a bare "context deadline exceeded" says neither.
func finalExport(signal string, ex otelenv.Exporter, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("the final %s export (%s) failed: %w", signal, ex, err)
}

// printer prints one line per server span that carries energy.
type printer struct{}

func (printer) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	for _, s := range spans {
		var mj, out int64 = -1, 0
		co2e := -1.0
		var approx bool
		var run string
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case otelenergy.EnergyMillijoulesKey:
				mj = kv.Value.AsInt64()
			case "gen_ai.usage.output_tokens":
				out = kv.Value.AsInt64()
			case "otelenergy.energy.approximate":
				approx = kv.Value.AsBool()
			case "otelenergy.run.id":
				run = kv.Value.AsString()
			case "energy.co2e.milligrams":
				co2e = kv.Value.AsFloat64()
			}
		}
		if mj < 0 {
			continue
		}
		var emis string
		if co2e >= 0 {
			emis = fmt.Sprintf(" energy.co2e.milligrams=%.3f", co2e)
		}
		fmt.Printf("request trace=%s run=%.8s tokens=%d energy.millijoules=%d%s approximate=%t duration=%s\n",
			s.SpanContext().TraceID(), run, out, mj, emis, approx, s.EndTime().Sub(s.StartTime()).Round(time.Millisecond))
	}
	return nil
}

func (printer) Shutdown(context.Context) error { return nil }
