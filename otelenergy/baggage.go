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
// Cardinality is bounded: the first maxValues distinct values of each key
// (zero or less selects [DefaultBaggageValues]) are kept, and every later
// one is recorded as [BaggageOverflowValue], "_other". Baggage reaches the
// context through the propagator, so the application's propagator must
// include W3C baggage (propagation.Baggage; autoprop's default does).
//
// The attribute set of each combination of values is built once; a
// request then costs a context lookup and a lock-free map read per key.
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

// baggageAttrs maps requests' baggage to their attributes.
type baggageAttrs struct {
	keys   []attribute.Key
	names  []string
	max    int
	seen   []valueSet
	cache  atomic.Pointer[attrCache]
	mu     sync.Mutex // serializes writers of cache
	single bool       // one key: the common case
}

// attrCache is copied on write: readers take no lock.
type attrCache struct {
	run *runInfo
	m   map[baggageVals]*requestAttrs
}

// valueSet holds a key's admitted values, copied on write.
type valueSet struct {
	vals atomic.Pointer[map[string]struct{}]
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
	for i := range b.seen {
		b.seen[i].vals.Store(&map[string]struct{}{})
	}
	return b
}

// admit returns v, or the overflow value once max distinct values are
// kept.
func (s *valueSet) admit(v string, max int) string {
	if _, ok := (*s.vals.Load())[v]; ok {
		return v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.vals.Load()
	if _, ok := cur[v]; ok {
		return v
	}
	if len(cur) >= max {
		return BaggageOverflowValue
	}
	next := make(map[string]struct{}, len(cur)+1)
	for k := range cur {
		next[k] = struct{}{}
	}
	next[v] = struct{}{}
	s.vals.Store(&next)
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
		if a, ok := c.m[vals]; ok {
			return a
		}
	}
	return b.insert(vals, run)
}

func (b *baggageAttrs) insert(vals baggageVals, run *runInfo) *requestAttrs {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.cache.Load()
	if cur != nil && cur.run == run {
		if a, ok := cur.m[vals]; ok {
			return a
		}
	}
	next := &attrCache{run: run, m: map[baggageVals]*requestAttrs{}}
	if cur != nil && cur.run == run {
		for k, v := range cur.m {
			next.m[k] = v
		}
	}
	a := &requestAttrs{}
	for i, k := range b.keys {
		if vals[i] != "" {
			a.span = append(a.span, k.String(vals[i]))
		}
	}
	attrs := append(append([]attribute.KeyValue(nil), run.run.Attributes()...), a.span...)
	a.recordOpt = metric.WithAttributeSet(attribute.NewSet(attrs...))
	next.m[vals] = a
	b.cache.Store(next)
	return a
}
