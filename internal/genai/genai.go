// Package genai builds the GenAI semantic conventions' server metrics, with
// the bucket boundaries the conventions advise, for the packages that record
// them: the energy middleware and the OpenAI-compatible proxy.
package genai

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
)

// Bucket boundaries the GenAI semantic conventions advise for the server
// metrics, in seconds.
var (
	requestDurationBuckets    = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	timeToFirstTokenBuckets   = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	timePerOutputTokenBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
)

// Server holds gen_ai.server.request.duration,
// gen_ai.server.time_to_first_token and gen_ai.server.time_per_output_token.
type Server struct {
	Duration genaiconv.ServerRequestDuration
	TTFT     genaiconv.ServerTimeToFirstToken
	TPOT     genaiconv.ServerTimePerOutputToken
}

// NewServer builds the server metrics on m. An instrument that fails comes
// back as a no-op and its error goes to otel.Handle: no caller can act on
// it, and metrics must not stop a server.
func NewServer(m metric.Meter) Server {
	var s Server
	var err error
	if s.Duration, err = genaiconv.NewServerRequestDuration(m, metric.WithExplicitBucketBoundaries(requestDurationBuckets...)); err != nil {
		otel.Handle(err)
	}
	if s.TTFT, err = genaiconv.NewServerTimeToFirstToken(m, metric.WithExplicitBucketBoundaries(timeToFirstTokenBuckets...)); err != nil {
		otel.Handle(err)
	}
	if s.TPOT, err = genaiconv.NewServerTimePerOutputToken(m, metric.WithExplicitBucketBoundaries(timePerOutputTokenBuckets...)); err != nil {
		otel.Handle(err)
	}
	return s
}
