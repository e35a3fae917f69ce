package otelenergy

import (
	"net/http"

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
// energy.millijoules, gen_ai.usage.output_tokens, gen_ai.usage.input_tokens
// (when reported), otelenergy.run.id, otelenergy.energy.samples and
// otelenergy.energy.approximate. Without a recording span it sets nothing
// and costs little. When no energy could be attributed (no samples yet, or,
// in window-share mode, a window that saw no tokens) energy.millijoules is
// absent rather than 0; a request that was attributed nothing, such as one
// that produced no tokens beside requests that did, carries 0.
//
// The ResponseWriter is passed through untouched, so http.Flusher,
// http.Hijacker and streaming keep working. A nil Monitor makes the
// middleware a pass-through, so a service whose Monitor failed to start
// serves exactly as without it.
func NewMiddleware(m *Monitor) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if m == nil {
			return next
		}
		return &handler{m: m, next: next}
	}
}

// NewHandler wraps h with the middleware of [NewMiddleware].
func NewHandler(h http.Handler, m *Monitor) http.Handler { return NewMiddleware(m)(h) }

type handler struct {
	m    *Monitor
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := h.m.StartRequest(r.Context())
	defer h.m.finish(req)
	h.next.ServeHTTP(w, r.WithContext(req))
}

// finish ends r and reports it on the span in r's context and, outside
// ledger mode, on the request-energy histogram. In ledger mode the
// histogram is recorded with the exact figure when the ledger finalizes the
// request.
func (m *Monitor) finish(r *Request) {
	res := r.End()
	span := trace.SpanFromContext(r.Context)
	if span.IsRecording() {
		var kv [6]attribute.KeyValue
		kv[0] = r.run.spanAttr
		kv[1] = OutputTokensKey.Int64(int64(res.OutputTokens))
		n := 2
		if res.InputTokens > 0 {
			kv[n] = InputTokensKey.Int64(int64(res.InputTokens))
			n++
		}
		if res.HasEnergy {
			kv[n] = EnergyMillijoulesKey.Int64(int64(min(res.EnergyMJ, 1<<63-1)))
			kv[n+1] = EnergySamplesKey.Int(res.Samples)
			kv[n+2] = EnergyApproximateKey.Bool(res.Approximate)
			n += 3
		}
		span.SetAttributes(kv[:n]...)
		if res.HasEnergy && m.ledger != nil && m.pending.enabled.Load() {
			m.pending.put(span.SpanContext().SpanID(), r.requestState, m.now())
		}
	}
	if m.ledger == nil && res.HasEnergy {
		m.inst.requestEnergy.Record(r.Context, float64(res.EnergyMJ)/1000, r.run.recordOpt)
	}
}
