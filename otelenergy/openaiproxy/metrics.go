package openaiproxy

import (
	"sync"

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
	provider  attribute.KeyValue

	// The attribute sets of successful requests, by operation and models,
	// built once: a set and its option cost allocations a request need
	// not pay. Bounded, since models are named by clients.
	mu   sync.RWMutex
	sets map[setKey]metric.MeasurementOption
}

type setKey struct{ op, req, resp string }

// maxSets bounds the attribute sets kept; past it each request builds its
// own.
const maxSets = 256

// attrs returns the option with the GenAI metrics' attributes of a
// request of op, naming models req and resp (either may be empty).
func (inst *instruments) attrs(op, req, resp string) metric.MeasurementOption {
	k := setKey{op, req, resp}
	inst.mu.RLock()
	o, ok := inst.sets[k]
	inst.mu.RUnlock()
	if ok {
		return o
	}
	o = metric.WithAttributeSet(attribute.NewSet(inst.attrList(op, req, resp)...))
	inst.mu.Lock()
	if len(inst.sets) < maxSets {
		inst.sets[k] = o
	}
	inst.mu.Unlock()
	return o
}

// attrList returns the attributes of attrs, in a slice with room for one
// more.
func (inst *instruments) attrList(op, req, resp string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, OperationNameKey.String(op), inst.provider)
	if req != "" {
		attrs = append(attrs, RequestModelKey.String(req))
	}
	if resp != "" {
		attrs = append(attrs, ResponseModelKey.String(resp))
	}
	return attrs
}

func newInstruments(mp metric.MeterProvider, provider genaiconv.ProviderNameAttr) *instruments {
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	inst := &instruments{Server: genai.NewServer(m), reasonOpt: make(map[string]metric.AddOption, len(reasons)),
		provider: attribute.String("gen_ai.provider.name", string(provider)), sets: map[setKey]metric.MeasurementOption{}}
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
