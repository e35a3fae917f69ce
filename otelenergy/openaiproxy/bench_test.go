package openaiproxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// BenchmarkProxyStream streams the same 256-chunk completion, each chunk
// written and flushed on its own as vLLM does, through a bare
// httputil.ReverseProxy and through the energy middleware around this
// package's proxy (with its default usage rewrite), in one run.
func BenchmarkProxyStream(b *testing.B) {
	const chunks = 256
	s := &script{tokens: chunks, prompt: 20}
	backend := httptest.NewServer(s)
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	mon := newMonitor(b)
	bare := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() }}
	energy := otelenergy.NewMiddleware(mon)(openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider())))
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"energy", energy}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewServer(bc.h)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			body := chatRequest(true, "")
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for b.Loop() {
				resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chunks), "ns/chunk")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*chunks), "allocs/chunk")
		})
	}
}

// BenchmarkProxyCompletion sends a whole (non-streamed) chat completion
// through a bare httputil.ReverseProxy and through the energy middleware
// around this package's proxy, in one run: the per-request cost of
// reading the request and the response body, the usage and the
// bookkeeping, against the proxying itself.
func BenchmarkProxyCompletion(b *testing.B) {
	s := &script{tokens: 256, prompt: 20, json: true}
	backend := httptest.NewServer(s)
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	mon := newMonitor(b)
	bare := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() }}
	energy := otelenergy.NewMiddleware(mon)(openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider())))
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"energy", energy}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewServer(bc.h)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			body := chatRequest(false, "")
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
