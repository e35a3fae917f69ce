package openaiproxy

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
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

// Reasons a body passes through unparsed, the values of the reason
// attribute on otelenergy.proxy.unparsed.
const (
	ReasonRequestEncoding  = "request_encoding"  // the request body has a Content-Encoding
	ReasonRequestTooLarge  = "request_too_large" // the request body is above the bound
	ReasonMalformedRequest = "malformed_request" // the request body is not a JSON object
	ReasonContentEncoding  = "content_encoding"  // the response has a Content-Encoding
	ReasonMalformed        = "malformed"         // a response event or body is not the JSON expected
	ReasonTooLarge         = "too_large"         // a response event or body is above the bound
	ReasonTruncated        = "truncated"         // the stream ended before its end marker
	ReasonClientDisconnect = "client_disconnect" // the client went away mid-response
	ReasonInternal         = "internal"          // the parser failed; a bug, recovered
)

// ReasonKey is the attribute naming why a body passed through unparsed.
const ReasonKey = attribute.Key("reason")

// Attribute keys the proxy sets on spans and GenAI metrics.
const (
	OperationNameKey = attribute.Key("gen_ai.operation.name")
	RequestModelKey  = attribute.Key("gen_ai.request.model")
	ResponseModelKey = attribute.Key("gen_ai.response.model")
	ErrorTypeKey     = attribute.Key("error.type")
)

var reasons = []string{ReasonRequestEncoding, ReasonRequestTooLarge, ReasonMalformedRequest,
	ReasonContentEncoding, ReasonMalformed, ReasonTooLarge, ReasonTruncated, ReasonClientDisconnect, ReasonInternal}

// instruments are built once per proxy.
type instruments struct {
	duration  genaiconv.ServerRequestDuration
	ttft      genaiconv.ServerTimeToFirstToken
	tpot      genaiconv.ServerTimePerOutputToken
	unparsed  metric.Int64Counter
	overcount metric.Int64Counter
	reasonOpt map[string]metric.AddOption
	inputOpt  metric.AddOption
	outputOpt metric.AddOption
}

func newInstruments(mp metric.MeterProvider) *instruments {
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	inst := &instruments{reasonOpt: make(map[string]metric.AddOption, len(reasons))}
	var err error
	// A failed instrument comes back as a no-op; no caller can act on the
	// error, so it goes to the global handler.
	if inst.duration, err = genaiconv.NewServerRequestDuration(m, metric.WithExplicitBucketBoundaries(requestDurationBuckets...)); err != nil {
		otel.Handle(err)
	}
	if inst.ttft, err = genaiconv.NewServerTimeToFirstToken(m, metric.WithExplicitBucketBoundaries(timeToFirstTokenBuckets...)); err != nil {
		otel.Handle(err)
	}
	if inst.tpot, err = genaiconv.NewServerTimePerOutputToken(m, metric.WithExplicitBucketBoundaries(timePerOutputTokenBuckets...)); err != nil {
		otel.Handle(err)
	}
	if inst.unparsed, err = m.Int64Counter("otelenergy.proxy.unparsed", metric.WithUnit("{response}"),
		metric.WithDescription("Completion requests or responses the proxy passed through without reading them, by reason.")); err != nil {
		otel.Handle(err)
	}
	if inst.overcount, err = m.Int64Counter("otelenergy.proxy.tokens.overcount", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens the proxy reported beyond the usage the server later stated.")); err != nil {
		otel.Handle(err)
	}
	for _, r := range reasons {
		inst.reasonOpt[r] = metric.WithAttributeSet(attribute.NewSet(ReasonKey.String(r)))
	}
	inst.inputOpt = metric.WithAttributeSet(attribute.NewSet(attribute.String("gen_ai.token.type", string(genaiconv.TokenTypeInput))))
	inst.outputOpt = metric.WithAttributeSet(attribute.NewSet(attribute.String("gen_ai.token.type", string(genaiconv.TokenTypeOutput))))
	return inst
}
