package otelenergy

import (
	"bufio"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// scriptedServer serves requests whose handlers add tokens on command, so a
// test can interleave requests, clock ticks and samples deterministically.
type scriptedServer struct {
	t     *testing.T
	rig   *testRig
	h     http.Handler
	cmds  map[string]chan int
	acks  chan struct{}
	done  map[string]chan struct{}
	start map[string]float64 // true energy at the request's start
}

func newScripted(t *testing.T, rig *testRig, wrap func(http.Handler) http.Handler) *scriptedServer {
	s := &scriptedServer{t: t, rig: rig, cmds: map[string]chan int{}, acks: make(chan struct{}), done: map[string]chan struct{}{}}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch := s.cmds[r.URL.Path]
		s.acks <- struct{}{}
		for n := range ch {
			rig.m.AddTokens(r.Context(), n)
			s.acks <- struct{}{}
		}
	})
	s.h = wrap(inner)
	return s
}

func (s *scriptedServer) begin(path string) {
	s.cmds[path] = make(chan int)
	s.done[path] = make(chan struct{})
	go func() {
		defer close(s.done[path])
		s.h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}()
	<-s.acks
}

func (s *scriptedServer) tokens(path string, n int) {
	s.cmds[path] <- n
	<-s.acks
}

func (s *scriptedServer) end(path string) { close(s.cmds[path]) }

func (s *scriptedServer) wait(path string) { <-s.done[path] }

// ledgerIdle reports whether every request the ledger tracks has ended.
func (r *testRig) ledgerIdle() bool {
	l := r.m.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, q := range l.active {
		if !q.ended {
			return false
		}
	}
	return true
}

// trueMJ is the simulated GPUs' true cumulative energy.
func (r *testRig) trueMJ() float64 {
	var e uint64
	for i := range r.sim.Devices() {
		e += r.sim.TrueEnergyMJ(i)
	}
	return float64(e)
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

func newTracing(opts ...sdktrace.TracerProviderOption) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(sr)}, opts...)...)
	return sr, tp
}

// overlapScenario runs request /a for 10 intervals of 100 ms at 4 tokens per
// interval, and /b from interval 3 to 7 at 2 tokens per interval. It returns
// the reference energies: each interval's true energy split by the tokens
// produced in it (what the ledger computes), and each request's token share
// of the true energy over its own window (what window share computes).
type overlapRefs struct {
	ledger, window map[string]float64
	maxInterval    float64 // the largest one-interval energy: the edge tolerance
	metered        float64
}

// With ended set, overlapScenario waits for each request's handler chain to
// return when it ends it, so ends fall exactly on sample boundaries; leave it
// unset when span export blocks until the next sample.
func overlapScenario(s *scriptedServer, ended bool) overlapRefs {
	r := s.rig
	refs := overlapRefs{ledger: map[string]float64{}, window: map[string]float64{}}
	r.m.Sample()
	e0 := r.trueMJ()
	s.begin("/a")
	var eb0 float64
	var tokA, tokB, tokDuringB float64
	prev := e0
	for k := range 10 {
		if k == 3 {
			s.begin("/b")
			eb0 = prev
		}
		s.tokens("/a", 4)
		tokA += 4
		b := 0.0
		if k >= 3 && k <= 7 {
			s.tokens("/b", 2)
			b = 2
			tokB += 2
			tokDuringB += 6
		}
		r.tick(100 * time.Millisecond)
		cur := r.trueMJ()
		dE := cur - prev
		refs.ledger["/a"] += dE * 4 / (4 + b)
		refs.ledger["/b"] += dE * b / (4 + b)
		refs.maxInterval = math.Max(refs.maxInterval, dE)
		if k == 7 {
			s.end("/b")
			if ended {
				s.wait("/b")
			}
			refs.window["/b"] = (cur - eb0) * tokB / tokDuringB
		}
		prev = cur
	}
	s.end("/a")
	if ended {
		s.wait("/a")
	}
	refs.window["/a"] = (prev - e0) * tokA / (tokA + tokB)
	refs.metered = prev - e0
	return refs
}

func spansByPath(t *testing.T, spans []sdktrace.ReadOnlySpan) map[string]map[attribute.Key]attribute.Value {
	t.Helper()
	out := map[string]map[attribute.Key]attribute.Value{}
	for _, s := range spans {
		a := spanAttrs(s)
		out[a["url.path"].AsString()] = a
	}
	return out
}

func TestMiddlewareWindowShare(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, SimulatedConfig{}, WithAttribution(AttributionWindowShare))
	s := newScripted(t, rig, func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(NewMiddleware(rig.m)(h), "op", otelhttp.WithTracerProvider(tp))
	})
	refs := overlapScenario(s, true)
	s.wait("/a")
	s.wait("/b")
	got := spansByPath(t, sr.Ended())
	var sum float64
	for _, path := range []string{"/a", "/b"} {
		a := got[path]
		mj, ok := a[EnergyMillijoulesKey]
		if !ok {
			t.Fatalf("%s: no energy.millijoules: %v", path, a)
		}
		if diff := math.Abs(float64(mj.AsInt64()) - refs.window[path]); diff > 2*refs.maxInterval {
			t.Errorf("%s: energy.millijoules = %d, reference %.0f (tolerance %.0f)", path, mj.AsInt64(), refs.window[path], 2*refs.maxInterval)
		}
		sum += float64(mj.AsInt64())
		if a[EnergyApproximateKey].AsBool() {
			t.Errorf("%s: approximate over a window of several samples", path)
		}
		if a[RunIDKey].AsString() != rig.m.Run().ID() {
			t.Errorf("%s: run id %q, want %q", path, a[RunIDKey].AsString(), rig.m.Run().ID())
		}
	}
	if a, b := got["/a"], got["/b"]; a[OutputTokensKey].AsInt64() != 40 || b[OutputTokensKey].AsInt64() != 10 ||
		a[EnergySamplesKey].AsInt64() != 10 || b[EnergySamplesKey].AsInt64() != 5 {
		t.Errorf("tokens/samples: a=%v/%v b=%v/%v, want 40/10 and 10/5", a[OutputTokensKey].AsInt64(), a[EnergySamplesKey].AsInt64(),
			b[OutputTokensKey].AsInt64(), b[EnergySamplesKey].AsInt64())
	}
	// Window share with overlapping requests of different lengths does not
	// conserve energy: this is what the ledger fixes.
	if math.Abs(sum-refs.metered) < 1 {
		t.Logf("window share happened to conserve energy: %v of %v", sum, refs.metered)
	}
}

func TestMiddlewareLedgerExactAndConserving(t *testing.T) {
	inmem := tracetest.NewInMemoryExporter()
	rig := newRig(t, SimulatedConfig{})
	_, tp := newTracing(sdktrace.WithBatcher(NewSpanExporter(inmem, rig.m), sdktrace.WithBatchTimeout(time.Hour)))
	defer tp.Shutdown(context.Background())
	s := newScripted(t, rig, func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(NewMiddleware(rig.m)(h), "op", otelhttp.WithTracerProvider(tp))
	})
	unattributed0 := rig.m.Totals().UnattributedMJ
	refs := overlapScenario(s, true)
	// Both requests ended on sample boundaries; the next sample finalizes
	// them, and the flush exports their exact figures.
	rig.tick(100 * time.Millisecond)
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := spansByPath(t, inmem.GetSpans().Snapshots())
	var sum int64
	for _, path := range []string{"/a", "/b"} {
		a := got[path]
		mj := a[EnergyMillijoulesKey].AsInt64()
		if diff := math.Abs(float64(mj) - refs.ledger[path]); diff > 2 {
			t.Errorf("%s: energy.millijoules = %d, ledger reference %.1f", path, mj, refs.ledger[path])
		}
		if a[EnergyApproximateKey].AsBool() {
			t.Errorf("%s: finalized span still approximate", path)
		}
		sum += mj
	}
	// a and b ended on sample boundaries, so the extra tick gave them
	// nothing: their energy plus what went unattributed is what was metered.
	tot := rig.m.Totals()
	if unattributed := tot.UnattributedMJ - unattributed0; uint64(sum)+unattributed != tot.TotalEnergyMJ() {
		t.Errorf("Σ requests %d + unattributed %d != metered %d", sum, unattributed, tot.TotalEnergyMJ())
	}
}

func TestMiddlewareLedgerEstimate(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, SimulatedConfig{})
	s := newScripted(t, rig, func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(NewMiddleware(rig.m)(h), "op", otelhttp.WithTracerProvider(tp))
	})
	refs := overlapScenario(s, true)
	s.wait("/a")
	s.wait("/b")
	for path, a := range spansByPath(t, sr.Ended()) {
		mj := a[EnergyMillijoulesKey].AsInt64()
		if diff := math.Abs(float64(mj) - refs.ledger[path]); diff > 2*refs.maxInterval {
			t.Errorf("%s: estimated energy.millijoules = %d, ledger reference %.0f", path, mj, refs.ledger[path])
		}
	}
}

func TestMiddlewareRequestWithoutTokens(t *testing.T) {
	for _, mode := range []Attribution{AttributionWindowShare, AttributionLedger} {
		t.Run(mode.String(), func(t *testing.T) {
			sr, tp := newTracing()
			rig := newRig(t, SimulatedConfig{}, WithAttribution(mode))
			s := newScripted(t, rig, func(h http.Handler) http.Handler {
				return otelhttp.NewHandler(NewMiddleware(rig.m)(h), "op", otelhttp.WithTracerProvider(tp))
			})
			rig.m.Sample()
			s.begin("/embed")
			for range 5 {
				rig.tick(100 * time.Millisecond)
			}
			s.end("/embed")
			s.wait("/embed")
			a := spanAttrs(sr.Ended()[0])
			mj, ok := a[EnergyMillijoulesKey]
			switch mode {
			case AttributionWindowShare:
				// A window with no tokens has no share to give.
				if ok {
					t.Fatalf("energy.millijoules = %v for a request whose window saw no tokens", mj.AsInt64())
				}
			case AttributionLedger:
				// Alone and tokenless, it is weighed by time and gets the
				// whole of the intervals it spanned.
				if !ok || float64(mj.AsInt64()) < 0.9*float64(rig.m.Totals().TotalEnergyMJ()) {
					t.Fatalf("energy.millijoules = %v (%v), metered %d", mj.AsInt64(), ok, rig.m.Totals().TotalEnergyMJ())
				}
			}
			if a[OutputTokensKey].AsInt64() != 0 {
				t.Fatalf("output tokens = %d", a[OutputTokensKey].AsInt64())
			}
		})
	}
}

func TestMiddlewareBeforeFirstSample(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, SimulatedConfig{})
	h := otelhttp.NewHandler(NewMiddleware(rig.m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.m.AddTokens(r.Context(), 3)
		w.WriteHeader(http.StatusTeapot)
	})), "op", otelhttp.WithTracerProvider(tp))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusTeapot {
		t.Fatalf("status %d: the request was not served unchanged", rec.Code)
	}
	a := spanAttrs(sr.Ended()[0])
	if _, ok := a[EnergyMillijoulesKey]; ok {
		t.Fatal("energy.millijoules set before any sample")
	}
	if a[OutputTokensKey].AsInt64() != 3 {
		t.Fatalf("output tokens = %v", a[OutputTokensKey])
	}
}

func TestMiddlewareWithoutOtelhttp(t *testing.T) {
	rig := newRig(t, SimulatedConfig{})
	rig.m.Sample()
	served := false
	h := NewMiddleware(rig.m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served = true
		if RequestFromContext(r.Context()) == nil {
			t.Error("handler context carries no Request")
		}
		rig.m.AddTokens(r.Context(), 2)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if !served || rig.m.Totals().OutputTokens != 2 {
		t.Fatalf("served=%v tokens=%d", served, rig.m.Totals().OutputTokens)
	}
	// A nil Monitor is a pass-through.
	inner := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if got := NewMiddleware(nil)(inner); got == nil {
		t.Fatal("nil Monitor middleware returned nil")
	}
}

func TestMiddlewarePanickingHandler(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, SimulatedConfig{})
	rig.m.Sample()
	h := otelhttp.NewHandler(NewMiddleware(rig.m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.m.AddTokens(r.Context(), 1)
		panic("handler bug")
	})), "op", otelhttp.WithTracerProvider(tp))
	func() {
		defer func() {
			if v := recover(); v != "handler bug" {
				t.Fatalf("recovered %v, want the handler's panic", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}()
	rig.tick(100 * time.Millisecond)
	rig.m.ledger.mu.Lock()
	left := len(rig.m.ledger.active)
	rig.m.ledger.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d requests left in the ledger after a panic", left)
	}
	if n := len(sr.Ended()); n != 1 {
		t.Fatalf("%d spans ended", n)
	}
}

func TestMiddlewareStreaming(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, SimulatedConfig{})
	rig.m.Sample()
	const chunks = 5
	srv := httptest.NewServer(otelhttp.NewHandler(NewMiddleware(rig.m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("ResponseWriter lost http.Flusher")
			return
		}
		if _, ok := w.(http.Hijacker); !ok {
			t.Error("ResponseWriter lost http.Hijacker")
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range chunks {
			w.Write([]byte("data: tok\n\n"))
			f.Flush()
			rig.m.AddTokens(r.Context(), 2)
			rig.tick(100 * time.Millisecond)
		}
	})), "stream", otelhttp.WithTracerProvider(tp)))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data:") {
			events++
		}
	}
	if events != chunks {
		t.Fatalf("client saw %d events, want %d", events, chunks)
	}
	srv.Close() // waits for the handler, so its span has ended
	a := spanAttrs(sr.Ended()[0])
	if a[OutputTokensKey].AsInt64() != 2*chunks {
		t.Fatalf("output tokens %v, want %d", a[OutputTokensKey], 2*chunks)
	}
	if mj, ok := a[EnergyMillijoulesKey]; !ok || mj.AsInt64() <= 0 {
		t.Fatalf("energy.millijoules = %v, %v", mj.AsInt64(), ok)
	}
}

// TestRequestEnergyHistogramExemplar checks that the request-energy
// histogram is recorded in the request's span context, so its exemplar
// links the metric to the trace.
func TestRequestEnergyHistogramExemplar(t *testing.T) {
	for _, mode := range []Attribution{AttributionWindowShare, AttributionLedger} {
		t.Run(mode.String(), func(t *testing.T) {
			rd := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
			sr, tp := newTracing()
			rig := newRig(t, SimulatedConfig{}, WithMeterProvider(mp), WithAttribution(mode), WithModel("llama"))
			s := newScripted(t, rig, func(h http.Handler) http.Handler {
				return otelhttp.NewHandler(NewMiddleware(rig.m)(h), "op", otelhttp.WithTracerProvider(tp))
			})
			overlapScenario(s, true)
			s.wait("/a")
			s.wait("/b")
			rig.tick(100 * time.Millisecond) // the ledger records at finalization
			m, ok := findMetric(collect(t, rd), MetricRequestEnergy)
			if !ok {
				t.Fatal("no request-energy histogram")
			}
			h := m.Data.(metricdata.Histogram[float64])
			if len(h.DataPoints) != 1 || h.DataPoints[0].Count != 2 || m.Unit != "J" {
				t.Fatalf("histogram %+v, want one point with two requests", h.DataPoints)
			}
			dp := h.DataPoints[0]
			if v, _ := dp.Attributes.Value(ModelKey); v.AsString() != "llama" {
				t.Fatalf("histogram attributes %v lack the model", dp.Attributes.ToSlice())
			}
			traces := map[string]bool{}
			for _, s := range sr.Ended() {
				traces[s.SpanContext().TraceID().String()] = true
			}
			if len(dp.Exemplars) == 0 {
				t.Fatal("no exemplars")
			}
			for _, e := range dp.Exemplars {
				id := hexID(e.TraceID)
				if !traces[id] {
					t.Fatalf("exemplar trace %s is not one of the request spans' %v", id, traces)
				}
			}
		})
	}
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
