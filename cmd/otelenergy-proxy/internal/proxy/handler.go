package proxy

import (
	"log"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// apiHandler is otelhttp's server span around the energy middleware
// around the proxy, behind the request body limit.
func (p *runner) apiHandler(mon *otelenergy.Monitor, tel *telemetry, errLog *log.Logger) http.Handler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = p.cfg.BackendTimeout
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 1024
	tr.DisableCompression = true // the client's Accept-Encoding passes as it came
	// One bound for the request bodies held and the responses
	// openaiproxy holds: -max-buffered-bytes.
	budget := openaiproxy.NewBudget(p.cfg.MaxBufferedBytes)
	var inner http.Handler = openaiproxy.New(p.cfg.Backend, mon, p.openaiOptions(tel, errLog, tr, budget)...)
	if p.cfg.LogRequests {
		inner = requestLog(p.log, inner)
	}
	h := otelenergy.NewMiddleware(mon)(inner)
	h = bodyLimit(p.cfg.MaxRequestBytes, budget, h)
	return otelhttp.NewHandler(h, "otelenergy-proxy",
		otelhttp.WithTracerProvider(tel.tp), otelhttp.WithMeterProvider(tel.mp), otelhttp.WithPropagators(tel.prop),
		otelhttp.WithSpanNameFormatter(spanName))
}

// spanName names server spans by method and, for the OpenAI routes, path;
// any other path would make span names unbounded.
func spanName(_ string, r *http.Request) string {
	switch r.URL.Path {
	case "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models":
		return r.Method + " " + r.URL.Path
	}
	return r.Method
}
