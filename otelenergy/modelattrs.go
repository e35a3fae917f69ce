package otelenergy

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelenergy/otelenergy/runscope"
)

// maxRequestModels bounds the distinct request models kept per run on
// otelenergy.request.energy; later ones are recorded as
// [BaggageOverflowValue]. A model name comes from the client's request
// body, so without a bound any client could grow the series.
const maxRequestModels = 100

// modelAttrs holds the request-energy histogram's attribute sets of
// requests that named a model (through internal/reqmodel, which
// openaiproxy sets): the run's attributes and the request's baggage
// attributes, with gen_ai.request.model replaced by the request's model.
// It is used where figures become final, off the request path; its
// zero value is ready. It is safe for concurrent use.
type modelAttrs struct {
	mu     sync.Mutex
	run    *runInfo
	models map[string]bool
	sets   map[modelSetKey]metric.RecordOption
}

type modelSetKey struct {
	base  *requestAttrs
	model string
}

// recordOpt returns the record option of a request of run with baggage
// attributes base (nil without) that named model.
func (c *modelAttrs) recordOpt(run *runInfo, base *requestAttrs, model string) metric.RecordOption {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != run {
		// A new run: its sets start afresh, as the baggage sets do.
		c.run, c.models, c.sets = run, map[string]bool{}, map[modelSetKey]metric.RecordOption{}
	}
	if !c.models[model] {
		if len(c.models) >= maxRequestModels {
			model = BaggageOverflowValue
		}
		c.models[model] = true
	}
	k := modelSetKey{base, model}
	if opt, ok := c.sets[k]; ok {
		return opt
	}
	attrs := append([]attribute.KeyValue(nil), run.run.Attributes()...)
	if base != nil {
		attrs = append(attrs, base.span...)
	}
	// NewSet keeps the last of duplicate keys: the request's model wins
	// over the run's.
	attrs = append(attrs, runscope.ModelKey.String(model))
	opt := metric.WithAttributeSet(attribute.NewSet(attrs...))
	c.sets[k] = opt
	return opt
}
