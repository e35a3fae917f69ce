package openaiproxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

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
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			postAll(b, client, srv.URL, chatRequest(true, ""), nil)
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
// bookkeeping, against the proxying itself. The proxy passes the request
// as it came (WithUpstreamStreaming(false)), so that both send the
// backend the same request and get the same whole body; what upstream
// streaming costs a non-streaming client is BenchmarkProxyUpstreamStream's.
func BenchmarkProxyCompletion(b *testing.B) {
	s := &script{tokens: 256, prompt: 20, json: true}
	backend := httptest.NewServer(s)
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	mon := newMonitor(b)
	bare := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() }}
	energy := otelenergy.NewMiddleware(mon)(openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider()),
		openaiproxy.WithUpstreamStreaming(false)))
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"energy", energy}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewServer(bc.h)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			postAll(b, client, srv.URL, chatRequest(false, ""), nil)
		})
	}
}

// postAll posts a chat completion request of body to srv once per
// iteration, reading each response whole, reports the process's CPU per
// request (cpu-ns/op), and appends each request's latency to lat when it
// is not nil.
func postAll(b *testing.B, client *http.Client, srv, body string, lat *[]time.Duration) {
	b.ReportAllocs()
	cpu := openaiproxy.CPUTime()
	for b.Loop() {
		start := time.Now()
		resp, err := client.Post(srv+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if lat != nil {
			*lat = append(*lat, time.Since(start))
		}
	}
	b.ReportMetric(float64(openaiproxy.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// discardWriter is a ResponseWriter that keeps nothing, for measuring the
// middleware's own cost.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

// BenchmarkChunkPath measures what the middleware adds to each streamed
// chunk, without a network: a handler writes and flushes 256 chunks (and
// the usage chunk the rewrite asks for), bare and inside the energy
// middleware around this package's middleware. cpu-ns/chunk is the
// process's CPU time per chunk, which a loaded machine inflates less than
// wall time.
func BenchmarkChunkPath(b *testing.B) {
	const chunks = 256
	s := &script{tokens: chunks, prompt: 20}
	events := s.events(true)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for _, e := range events {
			io.WriteString(w, e)
			f.Flush()
		}
	})
	mon := newMonitor(b)
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", inner}, {"energy", otelenergy.NewMiddleware(mon)(openaiproxy.NewMiddleware(mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider()))(inner))}} {
		b.Run(bc.name, func(b *testing.B) {
			body := chatRequest(true, "")
			b.ReportAllocs()
			cpu := openaiproxy.CPUTime()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
				bc.h.ServeHTTP(&discardWriter{h: http.Header{}}, r)
			}
			b.ReportMetric(float64(openaiproxy.CPUTime()-cpu)/float64(b.N*chunks), "cpu-ns/chunk")
		})
	}
}

// BenchmarkProxyUpstreamStream measures what upstream streaming costs a
// non-streaming client: a chat completion whose backend answers a whole
// body (whole: WithUpstreamStreaming(false)) or the stream the proxy asks
// for and rebuilds the body from (rebuilt). unpaced: 256 tokens as fast
// as the backend can write them, so that the whole cost of streaming
// them shows; paced: 64 tokens at 1 ms each, the whole body once the last
// is generated, as an engine answers. latency-us-p50 and latency-us-p99
// are the client's time to the whole body, cpu-ns/op the process's CPU
// per request.
func BenchmarkProxyUpstreamStream(b *testing.B) {
	for _, pc := range []struct {
		name string
		s    *script
	}{{"unpaced", &script{tokens: 256, prompt: 20, honour: true}}, {"paced", &script{tokens: 64, prompt: 20, honour: true, pace: time.Millisecond}}} {
		b.Run(pc.name, func(b *testing.B) { benchUpstreamStream(b, pc.s) })
	}
}

func benchUpstreamStream(b *testing.B, s *script) {
	backend := httptest.NewServer(s)
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	mon := newMonitor(b)
	for _, bc := range []struct {
		name string
		on   bool
	}{{"whole", false}, {"rebuilt", true}} {
		b.Run(bc.name, func(b *testing.B) {
			h := otelenergy.NewMiddleware(mon)(openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider()),
				openaiproxy.WithUpstreamStreaming(bc.on)))
			srv := httptest.NewServer(h)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			var lat []time.Duration
			postAll(b, client, srv.URL, chatRequest(false, ""), &lat)
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) }
			b.ReportMetric(q(0.5), "latency-us-p50")
			b.ReportMetric(q(0.99), "latency-us-p99")
		})
	}
}
