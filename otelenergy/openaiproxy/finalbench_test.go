package openaiproxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// BenchmarkProxyFinalTrailers measures what the final-figure trailers add
// to the end of a response: the time from the body's last byte at the
// client to the trailers, end-ms-p50 and end-ms-p99, with End's estimate
// (WithEnergyTrailers) and with the final figure (WithFinalTrailers, the
// proxy's default 500 ms wait), streamed (20 chunks 5 ms apart) and whole,
// one request at a time on a running simulated GPU with the default horizon,
// in one run. exact-frac
// is the share of trailers with Energy-Approximate: false; a whole
// response's final figure is itself approximate (it reports no timing), so
// it is 0 there even when the figure is final. settled-frac is the share
// whose trailers came within nine tenths of the wait: the wait ends early
// only when the ledger settles the request (the client stays), so those
// carried the final figure; one settled in the last tenth counts as not.
// warm-end-ms-p50 and warm-end-ms-p99 leave out the first ten requests,
// which a fresh Monitor's model is not ready for.
func BenchmarkProxyFinalTrailers(b *testing.B) {
	const (
		finalWait = 500 * time.Millisecond
		warmUp    = 10 // requests left out of the warm- figures
	)
	for _, mode := range []struct {
		name string
		opt  openaiproxy.Option
	}{{"estimate", openaiproxy.WithEnergyTrailers(true)}, {"final", openaiproxy.WithFinalTrailers(finalWait)}} {
		for _, stream := range []bool{true, false} {
			name := mode.name + map[bool]string{true: "/stream", false: "/whole"}[stream]
			b.Run(name, func(b *testing.B) {
				s := &script{tokens: 20, prompt: 9, json: !stream, pace: 5 * time.Millisecond}
				backend := httptest.NewServer(s)
				defer backend.Close()
				u, _ := url.Parse(backend.URL)
				mon := newMonitor(b)
				if err := mon.Start(); err != nil {
					b.Fatal(err)
				}
				p := openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider()), mode.opt)
				srv := httptest.NewServer(otelenergy.NewMiddleware(mon)(p))
				defer srv.Close()
				client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
				defer client.CloseIdleConnections()
				want := chatJSON(9, 20)
				if stream {
					want = strings.Join(s.events(false), "")
				}
				body := make([]byte, len(want))
				var ends []time.Duration
				final, settled := 0, 0
				b.ReportAllocs()
				for b.Loop() {
					resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatRequest(stream, "")))
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(resp.Body, body); err != nil {
						b.Fatal(err)
					}
					last := time.Now()
					io.Copy(io.Discard, resp.Body)
					end := time.Since(last)
					ends = append(ends, end)
					if end < finalWait*9/10 {
						settled++
					}
					resp.Body.Close()
					if resp.Trailer.Get(openaiproxy.TrailerApproximate) == "false" {
						final++
					}
				}
				// The first requests of a fresh Monitor wait for its model
				// (its splits wait, up to the horizon, for enough intervals
				// with work in them): the warm- figures leave them out.
				warm := slices.Clone(ends[min(len(ends), warmUp):])
				slices.Sort(ends)
				slices.Sort(warm)
				pct := func(ends []time.Duration, q float64) float64 {
					if len(ends) == 0 {
						return 0
					}
					return float64(ends[min(len(ends)-1, int(q*float64(len(ends))))].Microseconds()) / 1e3
				}
				b.ReportMetric(pct(ends, 0.5), "end-ms-p50")
				b.ReportMetric(pct(ends, 0.99), "end-ms-p99")
				b.ReportMetric(pct(warm, 0.5), "warm-end-ms-p50")
				b.ReportMetric(pct(warm, 0.99), "warm-end-ms-p99")
				b.ReportMetric(float64(final)/float64(len(ends)), "exact-frac")
				b.ReportMetric(float64(settled)/float64(len(ends)), "settled-frac")
			})
		}
	}
}
