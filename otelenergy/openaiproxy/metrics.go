package openaiproxy

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"

	"github.com/otelenergy/otelenergy/internal/genai"
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
	genai.Server
	unparsed  metric.Int64Counter
	overcount metric.Int64Counter
	reasonOpt map[string]metric.AddOption
	inputOpt  metric.AddOption
	outputOpt metric.AddOption
}

func newInstruments(mp metric.MeterProvider) *instruments {
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	inst := &instruments{Server: genai.NewServer(m), reasonOpt: make(map[string]metric.AddOption, len(reasons))}
	var err error
	// A failed instrument comes back as a no-op; no caller can act on the
	// error, so it goes to the global handler.
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
