package openaiproxy_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
	"github.com/otelenergy/otelenergy/simgpu"
)

// finalRig serves otelhttp, the energy middleware and the proxy with
// final trailers, over HTTP/1.1 and h2c; its spans go through
// NewSpanExporter, so each carries the ledger's final energy.millijoules.
type finalRig struct {
	srv   *httptest.Server
	tp    *sdktrace.TracerProvider
	inmem *tracetest.InMemoryExporter
	// ended receives, for each request, End's figure once the proxy's
	// handler returned, and whether the client's context had ended then.
	ended chan endedAt
}

type endedAt struct {
	res      otelenergy.Result
	at       time.Time
	canceled bool
	aborted  bool // the proxy's handler panicked: the response was cut
}

func newFinalRig(t *testing.T, mon *otelenergy.Monitor, backend http.Handler, wait time.Duration) *finalRig {
	t.Helper()
	b := httptest.NewServer(backend)
	t.Cleanup(b.Close)
	u, _ := url.Parse(b.URL)
	fr := &finalRig{inmem: tracetest.NewInMemoryExporter(), ended: make(chan endedAt, 4)}
	fr.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(otelenergy.NewSpanExporter(fr.inmem, mon), sdktrace.WithBatchTimeout(time.Hour)))
	t.Cleanup(func() { fr.tp.Shutdown(context.Background()) })
	p := openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider()), openaiproxy.WithFinalTrailers(wait))
	capture := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			fr.ended <- endedAt{otelenergy.RequestFromContext(r.Context()).End(), time.Now(), r.Context().Err() != nil, v != nil}
			if v != nil {
				panic(v)
			}
		}()
		p.ServeHTTP(w, r)
	})
	fr.srv = httptest.NewUnstartedServer(otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(capture), "proxy",
		otelhttp.WithTracerProvider(fr.tp), otelhttp.WithMeterProvider(sdkmetric.NewMeterProvider())))
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	fr.srv.Config.Protocols = &protos
	fr.srv.Start()
	t.Cleanup(fr.srv.Close)
	return fr
}

// spanMJ returns the energy.millijoules of the one exported span.
func (fr *finalRig) spanMJ(t *testing.T) int64 {
	t.Helper()
	v, ok := fr.spanAttr(t, "energy.millijoules")
	if !ok {
		t.Fatal("no energy.millijoules on the span")
	}
	return v.AsInt64()
}

// spanAttr returns the attribute key of the one exported span.
func (fr *finalRig) spanAttr(t *testing.T, key attribute.Key) (attribute.Value, bool) {
	t.Helper()
	if err := fr.tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := fr.inmem.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans exported, want 1", len(spans))
	}
	for _, a := range spans[0].Attributes {
		if a.Key == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func protoName(h2c, stream bool) string {
	return map[bool]string{false: "http1", true: "h2c"}[h2c] + map[bool]string{false: "/whole", true: "/stream"}[stream]
}

// TestFinalTrailers: with the final-figure trailers on a running sampler,
// the Energy-Millijoules trailer is the span's energy.millijoules (the
// ledger's final figure) within 0.1%, for streamed and whole completions
// over HTTP/1.1 and h2c, and the body is the backend's. With carbon, the
// Energy-Co2e-Milligrams trailer is the span's energy.co2e.milligrams
// (the span exporter's final figure) within 0.1% too.
func TestFinalTrailers(t *testing.T) {
	for _, withCarbon := range []bool{false, true} {
		for _, h2c := range []bool{false, true} {
			for _, stream := range []bool{true, false} {
				name := protoName(h2c, stream)
				if withCarbon {
					name += "/carbon"
				}
				t.Run(name, func(t *testing.T) { testFinalTrailers(t, h2c, stream, withCarbon) })
			}
		}
	}
}

func testFinalTrailers(t *testing.T, h2c, stream, withCarbon bool) {
	// A short horizon: the ledger settles an end within it
	// however the request reported.
	var opts []otelenergy.Option
	if withCarbon {
		opts = append(opts, otelenergy.WithCarbon(staticModel(t, 436_000)))
	}
	mon := shortHorizonMonitor(t, opts...)
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	s := &script{tokens: 20, prompt: 9, json: !stream, pace: 5 * time.Millisecond}
	fr := newFinalRig(t, mon, s, 5*time.Second)
	c := clientFor(h2c)
	defer c.CloseIdleConnections()
	resp, err := c.Post(fr.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatRequest(stream, "")))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := chatJSON(9, 20)
	if stream {
		want = strings.Join(s.events(false), "")
	}
	if string(body) != want {
		t.Fatalf("body\n%q\nwant\n%q", body, want)
	}
	<-fr.ended
	got, err := strconv.ParseInt(resp.Trailer.Get(openaiproxy.TrailerEnergy), 10, 64)
	if err != nil {
		t.Fatalf("trailers %v: %v", resp.Trailer, err)
	}
	span := fr.spanMJ(t)
	if span <= 0 {
		t.Fatalf("span energy.millijoules %d, want > 0", span)
	}
	if d := got - span; d*1000 > span || -d*1000 > span {
		t.Fatalf("trailer %d mJ, span %d mJ: more than 0.1%% apart (trailers %v)", got, span, resp.Trailer)
	}
	t.Logf("trailer %d mJ, span %d mJ, %s %s", got, span, openaiproxy.TrailerApproximate, resp.Trailer.Get(openaiproxy.TrailerApproximate))
	spanCo2, hasCo2 := fr.spanAttr(t, "energy.co2e.milligrams")
	trailerCo2 := resp.Trailer.Get(openaiproxy.TrailerCo2e)
	if !withCarbon {
		if hasCo2 || trailerCo2 != "" {
			t.Fatalf("carbon off: span energy.co2e.milligrams %v, trailer %q; want neither", spanCo2.Emit(), trailerCo2)
		}
		return
	}
	mg, err := strconv.ParseFloat(trailerCo2, 64)
	if err != nil || !hasCo2 {
		t.Fatalf("carbon on: trailer %q (%v), span energy.co2e.milligrams present %v", trailerCo2, err, hasCo2)
	}
	if smg := spanCo2.AsFloat64(); smg <= 0 || math.Abs(mg-smg) > smg/1000 {
		t.Fatalf("trailer %s mg, span %v mg: more than 0.1%% apart", trailerCo2, smg)
	}
	t.Logf("trailer %s mg, span %v mg", trailerCo2, spanCo2.AsFloat64())
}

func shortHorizonMonitor(t testing.TB, opts ...otelenergy.Option) *otelenergy.Monitor {
	t.Helper()
	src, err := simgpu.New(simgpu.Config{Devices: 1})
	if err != nil {
		t.Fatal(err)
	}
	mon, err := otelenergy.NewMonitor(src, append([]otelenergy.Option{otelenergy.WithMeterProvider(sdkmetric.NewMeterProvider()), otelenergy.WithHorizon(200 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mon.Shutdown(context.Background()) })
	return mon
}

// stoppingBackend serves s while a goroutine samples mon every 5 ms, and
// stops the sampling once s has written its whole response: the ledger
// can then never settle the request's end, which is what a sampler that
// lags behind a wait looks like.
func stoppingBackend(t *testing.T, mon *otelenergy.Monitor, s *script) http.Handler {
	h, _ := stoppingBackendDone(t, mon, s)
	return h
}

// stoppingBackendDone is stoppingBackend, and a channel closed once the
// backend's handler has returned.
func stoppingBackendDone(t *testing.T, mon *otelenergy.Monitor, s *script) (http.Handler, <-chan struct{}) {
	served := make(chan struct{})
	stop, stopped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); <-stopped }) }
	t.Cleanup(halt)
	mon.Sample()
	go func() {
		defer close(stopped)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				mon.Sample()
			}
		}
	}()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		s.ServeHTTP(w, r)
		halt()
	}), served
}

// TestFinalTrailersDeadline: when the figure does not become final within
// the wait, the trailers carry End's estimate with Energy-Approximate:
// true, and the response ends once the wait has passed.
func TestFinalTrailersDeadline(t *testing.T) {
	const wait = 200 * time.Millisecond
	for _, h2c := range []bool{false, true} {
		for _, stream := range []bool{true, false} {
			t.Run(protoName(h2c, stream), func(t *testing.T) {
				// The short horizon only bounds how long the span exporter
				// waits at shutdown; with no sample after the body, the
				// figure cannot become final.
				mon := shortHorizonMonitor(t)
				s := &script{tokens: 20, prompt: 9, json: !stream, pace: 5 * time.Millisecond}
				fr := newFinalRig(t, mon, stoppingBackend(t, mon, s), wait)
				c := clientFor(h2c)
				defer c.CloseIdleConnections()
				resp, err := c.Post(fr.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatRequest(stream, "")))
				if err != nil {
					t.Fatal(err)
				}
				want := chatJSON(9, 20)
				if stream {
					want = strings.Join(s.events(false), "")
				}
				body := make([]byte, len(want))
				if _, err := io.ReadFull(resp.Body, body); err != nil || string(body) != want {
					t.Fatalf("body %q (%v), want %q", body, err, want)
				}
				last := time.Now()
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ended := time.Since(last)
				e := <-fr.ended
				if !e.res.HasEnergy || !e.res.Approximate {
					t.Fatalf("End after the wait: %+v, want an approximate estimate", e.res)
				}
				if got := resp.Trailer.Get(openaiproxy.TrailerEnergy); got != strconv.FormatUint(e.res.EnergyMJ, 10) {
					t.Fatalf("%s trailer %q, want the estimate %d mJ", openaiproxy.TrailerEnergy, got, e.res.EnergyMJ)
				}
				if got := resp.Trailer.Get(openaiproxy.TrailerApproximate); got != "true" {
					t.Fatalf("%s trailer %q, want true", openaiproxy.TrailerApproximate, got)
				}
				// The body came whole before the wait; the trailers after it.
				if ended < wait*9/10 {
					t.Fatalf("the trailers came %v after the body's last byte, before the %v wait passed", ended, wait)
				}
			})
		}
	}
}

// TestFinalTrailersClientGone: a client that goes away after the body,
// while the proxy waits for the final figure, ends the wait at once, and
// no goroutine is left behind.
func TestFinalTrailersClientGone(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, h2c := range []bool{false, true} {
		for _, stream := range []bool{true, false} {
			t.Run(protoName(h2c, stream), func(t *testing.T) {
				mon := shortHorizonMonitor(t)
				s := &script{tokens: 20, prompt: 9, json: !stream, pace: 5 * time.Millisecond}
				backend, served := stoppingBackendDone(t, mon, s)
				fr := newFinalRig(t, mon, backend, time.Minute)
				c := clientFor(h2c)
				defer c.CloseIdleConnections()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fr.srv.URL+"/v1/chat/completions", strings.NewReader(chatRequest(stream, "")))
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				want := chatJSON(9, 20)
				if stream {
					want = strings.Join(s.events(false), "")
				}
				// The whole body arrives before the wait: it is not delayed.
				body := make([]byte, len(want))
				if _, err := io.ReadFull(resp.Body, body); err != nil || string(body) != want {
					t.Fatalf("body %q (%v), want %q", body, err, want)
				}
				// Leave once the proxy is in its wait: after the backend's
				// response ended (a client that leaves before that cuts
				// the response, which is another path).
				<-served
				time.Sleep(50 * time.Millisecond)
				gone := time.Now()
				cancel()
				resp.Body.Close()
				select {
				case e := <-fr.ended:
					// The stalled-sampler guard would end the wait only
					// about a second after the last sample.
					if d := e.at.Sub(gone); d < 0 || d > 500*time.Millisecond || !e.canceled || e.aborted {
						t.Fatalf("the handler returned %v after the client left (context ended: %v, response cut: %v)", d, e.canceled, e.aborted)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("the wait did not end when the client left")
				}
			})
		}
	}
}
