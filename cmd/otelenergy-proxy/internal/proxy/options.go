package proxy

import (
	"log"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// This file is where the flags become the library's options: flags.Parse
// makes a flags.Config of the command line, and these functions map it to
// the Monitor's and openaiproxy's options, and nowhere else.

// monitorOptions maps the flags to the Monitor's options.
func (p *runner) monitorOptions(tel *telemetry) []otelenergy.Option {
	opts := []otelenergy.Option{otelenergy.WithMeterProvider(tel.mp), otelenergy.WithHorizon(p.cfg.Horizon)}
	if len(p.cfg.BaggageKeys) > 0 {
		// -baggage-keys become attributes of the span and of
		// otelenergy.request.energy, -baggage-values values per key.
		opts = append(opts, otelenergy.WithBaggageAttributes(p.cfg.BaggageValues, p.cfg.BaggageKeys...))
	}
	if p.host != nil {
		// -sources rapl: each request's share of the host's CPU and
		// DRAM, by the backend's CPU time, beside its GPU energy.
		opts = append(opts, otelenergy.WithHostSource(p.host, p.pids...))
	}
	if p.carbon != nil {
		// The carbon flags' model: emissions on the span, on
		// otelenergy.request.co2e and in the Energy-Co2e-Milligrams
		// trailer.
		opts = append(opts, otelenergy.WithCarbon(p.carbon.Model))
	}
	return opts
}

// openaiOptions maps the flags to openaiproxy's options; the upstream
// requests go through tr, inside an otelhttp client span, and what it
// holds of responses is taken from budget.
func (p *runner) openaiOptions(tel *telemetry, errLog *log.Logger, tr http.RoundTripper, budget *openaiproxy.Budget) []openaiproxy.Option {
	trailers := openaiproxy.WithEnergyTrailers(p.cfg.Trailers)
	if p.cfg.TrailersFinal {
		// -trailers=final: the trailers wait up to -final-wait.
		trailers = openaiproxy.WithFinalTrailers(p.cfg.FinalWait)
	}
	return []openaiproxy.Option{
		openaiproxy.WithMeterProvider(tel.mp),
		openaiproxy.WithIncludeUsage(p.cfg.IncludeUsage),
		// -upstream-stream; -backend-timeout bounds a rebuilt response
		// whole, as it bounded the wait for a non-streaming response's
		// headers, which come only once its body is whole.
		openaiproxy.WithUpstreamStreaming(p.cfg.UpstreamStream),
		openaiproxy.WithUpstreamTimeout(p.cfg.BackendTimeout),
		// A response above the whole budget could never be held.
		openaiproxy.WithMaxResponseBytes(int(min(p.cfg.MaxResponseBytes, p.cfg.MaxBufferedBytes, 1<<30))),
		openaiproxy.WithBudget(budget),
		trailers,
		openaiproxy.WithMaxBodyBytes(int(min(p.cfg.MaxRequestBytes, 1<<30))),
		openaiproxy.WithErrorLog(errLog),
		openaiproxy.WithTransport(otelhttp.NewTransport(tr,
			otelhttp.WithTracerProvider(tel.tp), otelhttp.WithMeterProvider(tel.mp), otelhttp.WithPropagators(tel.prop))),
	}
}
