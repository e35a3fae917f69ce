package otelenergy

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/metric"
)

// DefaultBaggageValues is the number of distinct values kept per baggage
// key when [WithBaggageAttributes] is given zero or less.
const DefaultBaggageValues = 100

// MaxBaggageKeys is the most keys [WithBaggageAttributes] takes.
const MaxBaggageKeys = 8

// BaggageOverflowValue is the value recorded for a baggage key once its
// distinct values are exhausted.
const BaggageOverflowValue = "_other"

// WithBaggageAttributes copies the W3C baggage members named by keys from
// each request's context, as [Monitor.StartRequest] finds it, onto the
// request: the HTTP middleware and gRPC interceptors set them on its span,
// and the otelenergy.request.energy histogram is recorded with them, so
// that energy per tenant (or team, or application) is a sum by label with
// no join. The attribute's key is the baggage key; a request without the
// member has no such attribute.
//
// Cardinality is bounded twice: the first maxValues distinct values of
// each key (zero or less selects [DefaultBaggageValues]) are kept, and
// every later one is recorded as [BaggageOverflowValue], "_other"; and the
// first 1,000 distinct combinations of values in a run are kept, and a
// later combination is recorded with every key as "_other". So no
// mix of keys makes more than 1,001 attribute sets per run (3 keys of 30,
// 30 and 10 values would otherwise make 9,000). Baggage reaches the
// context through the propagator, so the application's propagator must
// include W3C baggage (propagation.Baggage; autoprop's default does).
//
// The attribute set of each combination of values is built once, in
// constant time; a request then costs a context lookup and a lock-free map
// read per key and one for the combination.
// More than [MaxBaggageKeys] keys, or an empty key, make NewMonitor fail
// with [ErrInvalidConfig]. The default copies no baggage.
func WithBaggageAttributes(maxValues int, keys ...string) Option {
	return optionFunc(func(c *config) {
		c.baggageKeys = append([]string(nil), keys...)
		c.baggageMax = maxValues
	})
}

func validateBaggage(c *config) error {
	if len(c.baggageKeys) > MaxBaggageKeys {
		return fmt.Errorf("%w: %d baggage keys, at most %d", ErrInvalidConfig, len(c.baggageKeys), MaxBaggageKeys)
	}
	for _, k := range c.baggageKeys {
		if k == "" {
			return fmt.Errorf("%w: an empty baggage key", ErrInvalidConfig)
		}
	}
	if c.baggageMax <= 0 {
		c.baggageMax = DefaultBaggageValues
	}
	return nil
}

// baggageVals are one request's admitted values, by key index; "" where
// the request has no member.
type baggageVals [MaxBaggageKeys]string

// requestAttrs are the attributes a request carries besides its run's.
// They are immutable and shared by every request with the same values.
type requestAttrs struct {
	span      []attribute.KeyValue
	recordOpt metric.RecordOption // the run's attributes and span's
}

// maxBaggageCombinations bounds the distinct combinations of baggage
// values, and so the attribute sets, kept per run.
const maxBaggageCombinations = 1000

// baggageAttrs maps requests' baggage to their attributes.
type baggageAttrs struct {
	keys  []attribute.Key
	names []string
	max   int
	seen  []valueSet
	cache atomic.Pointer[attrCache] // the current run's
	mu    sync.Mutex                // serializes insertions and run changes
}

// attrCache holds one run's attribute sets by combination. Readers take
// no lock; an insertion takes mu and costs O(1), whatever the size.
type attrCache struct {
	run      *runInfo
	m        sync.Map // baggageVals -> *requestAttrs
	n        int      // combinations stored; under mu
	overflow *requestAttrs
}

// valueSet holds a key's admitted values. Readers take no lock; an
// admission takes mu and costs O(1).
type valueSet struct {
	vals sync.Map // string -> struct{}
	n    int      // values admitted; under mu
	mu   sync.Mutex
}

func newBaggageAttrs(c config) *baggageAttrs {
	if len(c.baggageKeys) == 0 {
		return nil
	}
	b := &baggageAttrs{names: c.baggageKeys, max: c.baggageMax, seen: make([]valueSet, len(c.baggageKeys))}
	for _, k := range c.baggageKeys {
		b.keys = append(b.keys, attribute.Key(k))
	}
	return b
}

// admit returns v, or the overflow value once max distinct values are
// kept.
func (s *valueSet) admit(v string, max int) string {
	if _, ok := s.vals.Load(v); ok {
		return v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.vals.Load(v); ok {
		return v
	}
	if s.n >= max {
		return BaggageOverflowValue
	}
	s.vals.Store(v, struct{}{})
	s.n++
	return v
}

// lookup returns the attributes of the request whose context is ctx in
// run, or nil when it carries none of the keys.
func (b *baggageAttrs) lookup(ctx context.Context, run *runInfo) *requestAttrs {
	bg := baggage.FromContext(ctx)
	if bg.Len() == 0 {
		return nil
	}
	var vals baggageVals
	found := false
	for i, k := range b.names {
		if v := bg.Member(k).Value(); v != "" {
			vals[i] = b.seen[i].admit(v, b.max)
			found = true
		}
	}
	if !found {
		return nil
	}
	if c := b.cache.Load(); c != nil && c.run == run {
		if a, ok := c.m.Load(vals); ok {
			return a.(*requestAttrs)
		}
	}
	return b.insert(vals, run)
}

// insert adds vals's attributes to run's cache, or returns the overflow
// combination's once the cache is full.
func (b *baggageAttrs) insert(vals baggageVals, run *runInfo) *requestAttrs {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.cache.Load()
	if c == nil || c.run != run {
		// A new run: its attribute sets start afresh.
		c = &attrCache{run: run}
		b.cache.Store(c)
	}
	if a, ok := c.m.Load(vals); ok {
		return a.(*requestAttrs)
	}
	if c.n >= maxBaggageCombinations {
		if c.overflow == nil {
			var all baggageVals
			for i := range b.keys {
				all[i] = BaggageOverflowValue
			}
			c.overflow = b.build(all, run)
		}
		return c.overflow
	}
	a := b.build(vals, run)
	c.m.Store(vals, a)
	c.n++
	return a
}

// build makes the attributes of vals in run.
func (b *baggageAttrs) build(vals baggageVals, run *runInfo) *requestAttrs {
	a := &requestAttrs{}
	for i, k := range b.keys {
		if vals[i] != "" {
			a.span = append(a.span, k.String(vals[i]))
		}
	}
	attrs := append(append([]attribute.KeyValue(nil), run.run.Attributes()...), a.span...)
	a.recordOpt = metric.WithAttributeSet(attribute.NewSet(attrs...))
	return a
}
