package otelenergy

import (
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// NewMiddleware returns net/http middleware that attributes energy to each
// request handled by the wrapped handler.
//
// It is built to sit inside otelhttp, so that the server span exists while
// it runs and is still open when it sets attributes:
//
//	otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(mux), "server")
//
// The handler receives a request whose context carries a [Request];
// handlers report tokens with [Monitor.AddTokens] on that context. When the
// handler returns (or panics), the middleware sets on the current span
// energy.millijoules (the figure known then, see [Request.End]),
// gen_ai.usage.output_tokens, gen_ai.usage.input_tokens (when reported),
// otelenergy.run.id and otelenergy.energy.approximate, and with
// [WithCarbon] energy.co2e.milligrams (the request's emissions in mg
// CO2e, a float64); [NewSpanExporter] replaces the energy and emissions
// with the exact figures. Without a recording span it
// sets nothing. When no energy could be attributed energy.millijoules is
// absent rather than 0.
//
// The ResponseWriter is passed through untouched, so http.Flusher,
// http.Hijacker and streaming keep working. A nil Monitor makes the
// middleware a pass-through.
func NewMiddleware(m *Monitor) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if m == nil {
			return next
		}
		return &handler{m: m, next: next}
	}
}

type handler struct {
	m    *Monitor
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := h.m.StartRequest(r.Context())
	defer h.m.finish(req)
	h.next.ServeHTTP(w, r.WithContext(req))
}

// attrPool holds the arrays finish stages span attributes in, so that the
// variadic SetAttributes call costs no allocation: the SDK copies the
// attributes, so an array is free again once the call returns.
var attrPool = sync.Pool{New: func() any { return new([8 + hostClasses]attribute.KeyValue) }}

// finish ends r and reports it on the span in r's context. The histogram
// of request energy is recorded when the figure is final.
func (m *Monitor) finish(r *Request) {
	res := r.End()
	span := trace.SpanFromContext(r.Context)
	if !span.IsRecording() {
		return
	}
	kv := attrPool.Get().(*[8 + hostClasses]attribute.KeyValue)
	defer attrPool.Put(kv)
	kv[0] = r.st.run.spanAttr
	kv[1] = outputTokensKey.Int64(int64(res.OutputTokens))
	n := 2
	if res.InputTokens > 0 {
		kv[n] = inputTokensKey.Int64(int64(res.InputTokens))
		n++
	}
	if res.CachedInputTokens > 0 {
		kv[n] = cachedInputTokensKey.Int64(int64(res.CachedInputTokens))
		n++
	}
	if res.HasEnergy {
		kv[n] = EnergyMillijoulesKey.Int64(int64(min(res.EnergyMJ, 1<<63-1)))
		kv[n+1] = approximateKey.Bool(res.Approximate)
		n += 2
		if res.Shared {
			kv[n] = sharedKey.Bool(true)
			n++
		}
		if res.HasCo2e {
			kv[n] = co2eKey.Float64(float64(res.Co2eMicrograms) / 1000)
			n++
		}
		n += hostAttrs(kv[n:], res)
	}
	span.SetAttributes(kv[:n]...)
	if a := r.st.attrs; a != nil {
		span.SetAttributes(a.span...)
	}
	if res.HasEnergy && res.Approximate && m.pending.enabled.Load() {
		m.pending.put(span.SpanContext().SpanID(), r.st, m.now())
	}
}
