// Package tee fans spans out to several exporters, for the examples that
// print spans and export them too. NewSpanExporter wraps one exporter per
// Monitor, so a fan-out goes inside it.
package tee

import (
	"context"
	"errors"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Exporters sends spans to each of its exporters.
type Exporters []sdktrace.SpanExporter

var _ sdktrace.SpanExporter = Exporters(nil)

// ExportSpans exports spans to every exporter, and joins their errors.
func (t Exporters) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	var errs []error
	for _, e := range t {
		errs = append(errs, e.ExportSpans(ctx, spans))
	}
	return errors.Join(errs...)
}

// Shutdown shuts every exporter down, and joins their errors.
func (t Exporters) Shutdown(ctx context.Context) error {
	var errs []error
	for _, e := range t {
		errs = append(errs, e.Shutdown(ctx))
	}
	return errors.Join(errs...)
}
