package otelenergy

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/otelenergy/otelenergy/simgpu"
)

// scriptedServer serves requests whose handlers add tokens on command, so a
// test can interleave requests, clock ticks and samples deterministically.
// Each request drives a job on the rig's GPU, so the energy follows the
// tokens.
type scriptedServer struct {
	rig  *testRig
	h    http.Handler
	mu   sync.Mutex
	cmds map[string]chan int
	acks chan struct{}
	done map[string]chan struct{}
	st   map[string]*requestState
}

func newScripted(rig *testRig, wrap func(http.Handler) http.Handler) *scriptedServer {
	s := &scriptedServer{rig: rig, cmds: map[string]chan int{}, acks: make(chan struct{}), done: map[string]chan struct{}{}, st: map[string]*requestState{}}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		ch := s.cmds[r.URL.Path]
		if q := RequestFromContext(r.Context()); q != nil {
			s.st[r.URL.Path] = q.st
		}
		s.mu.Unlock()
		job := rig.gpu.Begin(0)
		defer job.End()
		s.acks <- struct{}{}
		for n := range ch {
			job.Tokens(n)
			rig.m.AddTokens(r.Context(), n)
			s.acks <- struct{}{}
		}
	})
	s.h = wrap(inner)
	return s
}

func (s *scriptedServer) begin(path string) {
	s.mu.Lock()
	s.cmds[path] = make(chan int)
	s.done[path] = make(chan struct{})
	s.mu.Unlock()
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

// end ends the request and waits for its handler chain to return.
func (s *scriptedServer) end(path string) {
	close(s.cmds[path])
	<-s.done[path]
}

// overlapScenario runs request /a for 10 steps at 4 tokens per step, and
// /b from step 3 to 7 at 2 tokens per step; both end on counter steps.
func overlapScenario(s *scriptedServer) {
	r := s.rig
	r.m.Sample()
	s.begin("/a")
	for k := range 10 {
		if k == 3 {
			s.begin("/b")
		}
		s.tokens("/a", 4)
		if k >= 3 && k <= 7 {
			s.tokens("/b", 2)
		}
		r.tick(step)
		if k == 7 {
			s.end("/b")
		}
	}
	s.end("/a")
}

func spansByPath(spans []sdktrace.ReadOnlySpan) map[string]map[attribute.Key]attribute.Value {
	out := map[string]map[attribute.Key]attribute.Value{}
	for _, s := range spans {
		a := spanAttrs(s)
		out[a["url.path"].AsString()] = a
	}
	return out
}

// flushWhileSampling force-flushes tp while the rig keeps sampling, so
// that an exporter waiting for final figures gets them. It samples only
// after the flush has had time to reach the exporter, so that an exporter
// that does not wait exports the estimates.
func flushWhileSampling(t *testing.T, rig *testRig, tp *sdktrace.TracerProvider) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- tp.ForceFlush(context.Background()) }()
	time.Sleep(100 * time.Millisecond)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-time.After(2 * time.Millisecond):
			rig.tick(step)
		}
	}
}

// TestSpanExporterCarriesFinalFigure exports request spans through
// NewSpanExporter before their figures are final: the exporter waits, and
// each span carries exactly the ledger's final figure, not the estimate,
// and is no longer approximate. The requests and what no request got add
// up to what the ledger split.
func TestSpanExporterCarriesFinalFigure(t *testing.T) {
	inmem := tracetest.NewInMemoryExporter()
	rig := newRig(t, ideal(simgpu.Config{}))
	_, tp := newTracing(sdktrace.WithBatcher(NewSpanExporter(inmem, rig.m), sdktrace.WithBatchTimeout(time.Hour)))
	defer tp.Shutdown(context.Background())
	s := newScripted(rig, func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(NewMiddleware(rig.m)(h), "op", otelhttp.WithTracerProvider(tp))
	})
	overlapScenario(s)
	if s.st["/a"].Final() {
		t.Fatal("/a final before the flush: the exporter's wait is not exercised")
	}
	flushWhileSampling(t, rig, tp)
	got := spansByPath(inmem.GetSpans().Snapshots())
	var sum uint64
	for _, path := range []string{"/a", "/b"} {
		a, st := got[path], s.st[path]
		if !st.Final() {
			t.Fatalf("%s: not final after the flush", path)
		}
		mj, ok := a[EnergyMillijoulesKey]
		if !ok || mj.AsInt64() != int64(st.EnergyMJ()) || st.EnergyMJ() == 0 {
			t.Errorf("%s: energy.millijoules = %v (%v), the ledger's final figure %d mJ", path, mj.AsInt64(), ok, st.EnergyMJ())
		}
		if v, ok := a["otelenergy.energy.approximate"]; !ok || v.AsBool() {
			t.Errorf("%s: otelenergy.energy.approximate = %v (%v) on a final figure", path, v.AsBool(), ok)
		}
		if a["otelenergy.run.id"].AsString() != rig.m.Run().ID() {
			t.Errorf("%s: run id %q, want %q", path, a["otelenergy.run.id"].AsString(), rig.m.Run().ID())
		}
		sum += st.EnergyMJ()
	}
	if a, b := got["/a"], got["/b"]; a["gen_ai.usage.output_tokens"].AsInt64() != 40 || b["gen_ai.usage.output_tokens"].AsInt64() != 10 {
		t.Errorf("output tokens a=%v b=%v, want 40 and 10", a["gen_ai.usage.output_tokens"], b["gen_ai.usage.output_tokens"])
	}
	l := rig.m.ledger
	if sum+l.Unattributed()+l.OtherProcesses() != l.SplitMJ() {
		t.Errorf("Σ requests %d + unattributed %d != split %d", sum, l.Unattributed(), l.SplitMJ())
	}
}

// TestMiddlewareEstimateIsApproximate reads the spans as they end: they
// carry an estimate, marked approximate, because the intervals at their
// end are not split yet.
func TestMiddlewareEstimateIsApproximate(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, ideal(simgpu.Config{}))
	s := newScripted(rig, func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(NewMiddleware(rig.m)(h), "op", otelhttp.WithTracerProvider(tp))
	})
	overlapScenario(s)
	got := spansByPath(sr.Ended())
	for _, path := range []string{"/a", "/b"} {
		a := got[path]
		if mj, ok := a[EnergyMillijoulesKey]; !ok || mj.AsInt64() <= 0 {
			t.Errorf("%s: estimated energy.millijoules = %v, %v", path, mj.AsInt64(), ok)
		}
		if v, ok := a["otelenergy.energy.approximate"]; !ok || !v.AsBool() {
			t.Errorf("%s: otelenergy.energy.approximate = %v (%v) on an estimate", path, v.AsBool(), ok)
		}
	}
}

// TestSpanExporterShortRequestStaysApproximate: a request shorter than the
// counter's update period is approximate for good, even once final.
func TestSpanExporterShortRequestStaysApproximate(t *testing.T) {
	inmem := tracetest.NewInMemoryExporter()
	rig := newRig(t, ideal(simgpu.Config{}))
	_, tp := newTracing(sdktrace.WithBatcher(NewSpanExporter(inmem, rig.m), sdktrace.WithBatchTimeout(time.Hour)))
	defer tp.Shutdown(context.Background())
	rig.m.Sample()
	h := otelhttp.NewHandler(NewMiddleware(rig.m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.clock.Advance(10 * time.Millisecond)
		rig.m.AddTokens(r.Context(), 1)
	})), "op", otelhttp.WithTracerProvider(tp))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/short", nil))
	flushWhileSampling(t, rig, tp)
	a := spanAttrs(inmem.GetSpans().Snapshots()[0])
	if _, ok := a[EnergyMillijoulesKey]; !ok {
		t.Fatal("no energy.millijoules")
	}
	if v, ok := a["otelenergy.energy.approximate"]; !ok || !v.AsBool() {
		t.Fatalf("otelenergy.energy.approximate = %v (%v) for a request shorter than the counter period", v.AsBool(), ok)
	}
}

func TestMiddlewareRequestWithoutTokens(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, ideal(simgpu.Config{}))
	s := newScripted(rig, func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(NewMiddleware(rig.m)(h), "op", otelhttp.WithTracerProvider(tp))
	})
	rig.m.Sample()
	s.begin("/embed")
	for range 5 {
		rig.tick(step)
	}
	s.end("/embed")
	rig.settle(t)
	a := spanAttrs(sr.Ended()[0])
	if _, ok := a[EnergyMillijoulesKey]; !ok {
		t.Fatal("no energy.millijoules for a tokenless request")
	}
	// Alone and tokenless, it is weighed by time and gets the intervals it
	// spanned.
	if got, metered := s.st["/embed"].EnergyMJ(), 5*6000; got != uint64(metered) {
		t.Fatalf("final energy %d mJ, want the %d mJ metered while it ran alone", got, metered)
	}
	if a["gen_ai.usage.output_tokens"].AsInt64() != 0 {
		t.Fatalf("output tokens = %d", a["gen_ai.usage.output_tokens"].AsInt64())
	}
}

func TestMiddlewareBeforeFirstSample(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, ideal(simgpu.Config{}))
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
	if a["gen_ai.usage.output_tokens"].AsInt64() != 3 {
		t.Fatalf("output tokens = %v", a["gen_ai.usage.output_tokens"])
	}
}

func TestMiddlewareWithoutOtelhttp(t *testing.T) {
	rig := newRig(t, ideal(simgpu.Config{}))
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
	rig.m.Sample() // the totals are as of the last sample
	if !served || rig.m.Totals().OutputTokens != 2 {
		t.Fatalf("served=%v tokens=%d", served, rig.m.Totals().OutputTokens)
	}
	inner := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if got := NewMiddleware(nil)(inner); got == nil {
		t.Fatal("nil Monitor middleware returned nil")
	}
}

func TestMiddlewarePanickingHandler(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, ideal(simgpu.Config{}))
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
	rig.tick(step)
	rig.tick(step)
	if left := rig.m.ledger.Active(); left != 0 {
		t.Fatalf("%d requests left in the ledger after a panic", left)
	}
	if n := len(sr.Ended()); n != 1 {
		t.Fatalf("%d spans ended", n)
	}
}

func TestMiddlewareStreaming(t *testing.T) {
	sr, tp := newTracing()
	rig := newRig(t, ideal(simgpu.Config{}))
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
			rig.tick(step)
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
	if a["gen_ai.usage.output_tokens"].AsInt64() != 2*chunks {
		t.Fatalf("output tokens %v, want %d", a["gen_ai.usage.output_tokens"], 2*chunks)
	}
	if mj, ok := a[EnergyMillijoulesKey]; !ok || mj.AsInt64() <= 0 {
		t.Fatalf("energy.millijoules = %v, %v", mj.AsInt64(), ok)
	}
}

// TestRequestEnergyHistogramExemplar checks that the request-energy
// histogram is recorded, once the figures are final, in the request's span
// context, so its exemplar links the metric to the trace.
func TestRequestEnergyHistogramExemplar(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	sr, tp := newTracing()
	rig := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp), WithModel("llama"))
	s := newScripted(rig, func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(NewMiddleware(rig.m)(h), "op", otelhttp.WithTracerProvider(tp))
	})
	overlapScenario(s)
	rig.settle(t)
	m, ok := findMetric(collect(t, rd), "otelenergy.request.energy")
	if !ok {
		t.Fatal("no request-energy histogram")
	}
	h := m.Data.(metricdata.Histogram[float64])
	if len(h.DataPoints) != 1 || h.DataPoints[0].Count != 2 || m.Unit != "J" {
		t.Fatalf("histogram %+v, want one point with two requests", h.DataPoints)
	}
	dp := h.DataPoints[0]
	if want := float64(s.st["/a"].EnergyMJ()+s.st["/b"].EnergyMJ()) / 1000; dp.Sum != want {
		t.Errorf("histogram sum %v J, want the final figures' %v J", dp.Sum, want)
	}
	if v, _ := dp.Attributes.Value("gen_ai.request.model"); v.AsString() != "llama" {
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
		if id := hexID(e.TraceID); !traces[id] {
			t.Fatalf("exemplar trace %s is not one of the request spans' %v", id, traces)
		}
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
