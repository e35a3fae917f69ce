package openaiproxy_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

func TestStreamUsageRewriteStripped(t *testing.T) {
	s := &script{tokens: 12, prompt: 20, seenBody: make(chan []byte, 1)}
	r := newRig(t, s)
	resp, got := r.post(t, "/v1/chat/completions", chatRequest(true, ""))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sent := <-s.seenBody
	if !bytes.Contains(sent, []byte(`"stream_options":{"include_usage":true}`)) {
		t.Fatalf("upstream request lacks include_usage: %s", sent)
	}
	if want := strings.Join(s.events(false), ""); string(got) != want {
		t.Fatalf("client received\n%q\nwant what the backend sends without the rewrite\n%q", got, want)
	}
	if c := r.wait(t); c.out != 12 || c.in != 20 {
		t.Fatalf("reported %d output, %d input tokens; want the usage, 12 and 20", c.out, c.in)
	}
	if u := r.unparsed(t); len(u) != 0 {
		t.Fatalf("unparsed %v", u)
	}
}

func TestStreamRequestRewriteKeepsBytes(t *testing.T) {
	s := &script{tokens: 1, prompt: 1, seenBody: make(chan []byte, 1)}
	r := newRig(t, s)
	req := chatRequest(true, `"temperature":0.5,`)
	r.post(t, "/v1/chat/completions", req)
	sent := <-s.seenBody
	if want := `{"stream_options":{"include_usage":true},` + req[1:]; string(sent) != want {
		t.Fatalf("upstream got\n%s\nwant\n%s", sent, want)
	}
	r.wait(t)
}

func TestStreamWithoutRewrite(t *testing.T) {
	s := &script{tokens: 7, prompt: 20, seenBody: make(chan []byte, 1)}
	r := newRig(t, s, openaiproxy.WithIncludeUsage(false))
	req := chatRequest(true, "")
	_, got := r.post(t, "/v1/chat/completions", req)
	if sent := <-s.seenBody; string(sent) != req {
		t.Fatalf("upstream got %s, want the client's body", sent)
	}
	if want := strings.Join(s.events(false), ""); string(got) != want {
		t.Fatalf("client received %q, want %q", got, want)
	}
	// One token per content chunk; the prompt estimate is 38 bytes / 4.
	if c := r.wait(t); c.out != 7 || c.in != 10 {
		t.Fatalf("reported %d output, %d input tokens; want 7 and 10", c.out, c.in)
	}
}

func TestStreamClientAskedForUsage(t *testing.T) {
	s := &script{tokens: 5, prompt: 3, seenBody: make(chan []byte, 1)}
	r := newRig(t, s)
	req := chatRequest(true, `"stream_options":{"include_usage":true},`)
	_, got := r.post(t, "/v1/chat/completions", req)
	if sent := <-s.seenBody; string(sent) != req {
		t.Fatalf("upstream got %s, want the client's body", sent)
	}
	if want := strings.Join(s.events(true), ""); string(got) != want {
		t.Fatalf("client received %q, want the usage chunk kept: %q", got, want)
	}
	// The estimate (10) overshoots the usage (3) and stays.
	if c := r.wait(t); c.out != 5 || c.in != 10 {
		t.Fatalf("reported %d output, %d input tokens; want 5 and 10", c.out, c.in)
	}
}

func TestNonStreaming(t *testing.T) {
	s := &script{tokens: 9, prompt: 31, json: true}
	r := newRig(t, s)
	_, got := r.post(t, "/v1/chat/completions", chatRequest(false, ""))
	if want := chatJSON(31, 9); string(got) != want {
		t.Fatalf("client received %s, want %s", got, want)
	}
	if c := r.wait(t); c.out != 9 || c.in != 31 {
		t.Fatalf("reported %d output, %d input tokens; want 9 and 31", c.out, c.in)
	}
}

func TestTextCompletionStream(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"a", "b", ""} {
			io.WriteString(w, `data: {"id":"x","object":"text_completion","model":"m","choices":[{"index":0,"text":"`+tok+`","finish_reason":null}]}`+"\n\n")
		}
		io.WriteString(w, done)
	}))
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	mon := newMonitor(t)
	var c counts
	h := otelenergy.NewMiddleware(mon)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		openaiproxy.New(u, mon, openaiproxy.WithIncludeUsage(false), openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider())).ServeHTTP(w, r)
		res := otelenergy.RequestFromContext(r.Context()).End()
		c = counts{res.OutputTokens, res.InputTokens, res.CachedInputTokens}
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"model":"m","stream":true,"prompt":[1,2,3,4,5]}`)))
	if c.out != 2 || c.in != 5 {
		t.Fatalf("reported %d output, %d input tokens; want 2 (empty text is no token) and 5 (token ids)", c.out, c.in)
	}
}

func TestGzipPassesThrough(t *testing.T) {
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	io.WriteString(zw, chatChunk("x")+done)
	zw.Close()
	s := &script{gzipBody: zb.Bytes()}
	// The usage rewrite would ask for identity; without it the client's
	// Accept-Encoding goes upstream and the transport leaves the body coded.
	r := newRig(t, s, openaiproxy.WithIncludeUsage(false))
	req, _ := http.NewRequest("POST", r.proxy.URL+"/v1/chat/completions", strings.NewReader(chatRequest(true, "")))
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, zb.Bytes()) {
		t.Fatalf("gzip body changed")
	}
	if c := r.wait(t); c.out != 0 {
		t.Fatalf("reported %d output tokens from an unread body", c.out)
	}
	if u := r.unparsed(t); u[openaiproxy.ReasonContentEncoding] != 1 {
		t.Fatalf("unparsed %v, want content_encoding 1", u)
	}
}

func TestMalformedEventPassesThrough(t *testing.T) {
	body := chatChunk("a") + chatChunk("b") + "data: {\"choices\":[{\"delta\":{\"content\":\"c\"}\n\n" + chatChunk("d") + done
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	}))
	defer backend.Close()
	r := newRigTo(t, backend)
	_, got := r.post(t, "/v1/chat/completions", chatRequest(true, ""))
	if string(got) != body {
		t.Fatalf("client received %q, want %q", got, body)
	}
	if c := r.wait(t); c.out != 2 {
		t.Fatalf("reported %d output tokens, want the 2 before the malformed event", c.out)
	}
	if u := r.unparsed(t); u[openaiproxy.ReasonMalformed] != 1 {
		t.Fatalf("unparsed %v, want malformed 1", u)
	}
}

func TestMalformedRequestPassesThrough(t *testing.T) {
	s := &script{tokens: 2, prompt: 1, seenBody: make(chan []byte, 1)}
	r := newRig(t, s)
	_, got := r.post(t, "/v1/chat/completions", `{"model":`)
	if sent := <-s.seenBody; string(sent) != `{"model":` {
		t.Fatalf("upstream got %q", sent)
	}
	if want := strings.Join(s.events(false), ""); string(got) != want {
		t.Fatalf("client received %q, want %q", got, want)
	}
	// The response is still read, from its Content-Type.
	if c := r.wait(t); c.out != 2 {
		t.Fatalf("reported %d output tokens, want 2", c.out)
	}
	if u := r.unparsed(t); u[openaiproxy.ReasonMalformedRequest] != 1 {
		t.Fatalf("unparsed %v", u)
	}
}

func TestBackendDiesMidStream(t *testing.T) {
	s := &script{tokens: 10, prompt: 4, dieAfter: 4}
	r := newRig(t, s)
	resp, err := r.client.Post(r.proxy.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatRequest(true, "")))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := strings.Join(s.events(true)[:4], ""); string(got) != want {
		t.Fatalf("client received %q, want the 4 events sent: %q", got, want)
	}
	if c := r.wait(t); c.out != 4 {
		t.Fatalf("reported %d output tokens, want the 4 that passed", c.out)
	}
	if u := r.unparsed(t); u[openaiproxy.ReasonTruncated] != 1 {
		t.Fatalf("unparsed %v, want truncated 1", u)
	}
}

func TestClientDisconnects(t *testing.T) {
	s := &script{tokens: 1000, prompt: 4, pace: 2 * time.Millisecond}
	r := newRig(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", r.proxy.URL+"/v1/chat/completions", strings.NewReader(chatRequest(true, "")))
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	for n := 0; n < 3; {
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		if buf[0] == '\n' {
			n++
		}
	}
	cancel()
	resp.Body.Close()
	c := r.wait(t)
	if c.out == 0 || c.out >= 1000 {
		t.Fatalf("reported %d output tokens, want those counted before the client left", c.out)
	}
	if u := r.unparsed(t); u[openaiproxy.ReasonClientDisconnect] != 1 {
		t.Fatalf("unparsed %v, want client_disconnect 1", u)
	}
}

func TestOtherPathsUntouched(t *testing.T) {
	type seen struct {
		method, path string
		body         []byte
		header       http.Header
	}
	got := make(chan seen, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, b, r.Header}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, usageChunk(1, 1))
	}))
	defer backend.Close()
	r := newRigTo(t, backend)
	for _, tc := range []struct{ name, method, path, body string }{
		{"embeddings", "POST", "/v1/embeddings", `{"model":"m","input":"x","stream":true}`},
		{"models", "GET", "/v1/models", ""},
		{"chat GET", "GET", "/v1/chat/completions", ""},
		{"chat subpath", "POST", "/v1/chat/completions/x", `{"stream":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, r.proxy.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := r.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			s := <-got
			if s.method != tc.method || s.path != tc.path || string(s.body) != tc.body || s.header.Get("Accept-Encoding") != "gzip" {
				t.Fatalf("backend saw %s %s %q %v", s.method, s.path, s.body, s.header)
			}
			if string(b) != usageChunk(1, 1) {
				t.Fatalf("client received %q", b)
			}
			if c := r.wait(t); c.out != 0 || c.in != 0 {
				t.Fatalf("reported %+v", c)
			}
		})
	}
	if u := r.unparsed(t); len(u) != 0 {
		t.Fatalf("unparsed %v", u)
	}
}

// newRigTo is newRig in front of a given backend, which it closes at the
// test's end.
func newRigTo(t *testing.T, backend *httptest.Server, opts ...openaiproxy.Option) *rig {
	r := newRig(t, &script{})
	r.backend.Close()
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	mon := newMonitor(t)
	p := openaiproxy.New(u, mon, append([]openaiproxy.Option{openaiproxy.WithMeterProvider(r.mp)}, opts...)...)
	r.proxy.Config.Handler = otelenergy.NewMiddleware(mon)(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		defer func() {
			res := otelenergy.RequestFromContext(req.Context()).End()
			r.counts <- counts{res.OutputTokens, res.InputTokens, res.CachedInputTokens}
		}()
		p.ServeHTTP(w, req)
	}))
	return r
}

// TestSpansAndMetrics checks the span attributes the proxy and the energy
// middleware set inside otelhttp, and the GenAI server metrics.
func TestSpansAndMetrics(t *testing.T) {
	s := &script{tokens: 6, prompt: 20, pace: 5 * time.Millisecond}
	backend := httptest.NewServer(s)
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	mon := newMonitor(t)
	h := otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(mp))), "gateway",
		otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(sdkmetric.NewMeterProvider()))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatRequest(true, ""))))
	spans := sr.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range spans[0].Attributes() {
		attrs[kv.Key] = kv.Value
	}
	for k, want := range map[attribute.Key]any{
		"gen_ai.operation.name":      "chat",
		"gen_ai.request.model":       model,
		"gen_ai.response.model":      model,
		"gen_ai.usage.output_tokens": int64(6),
		"gen_ai.usage.input_tokens":  int64(20),
	} {
		if v, ok := attrs[k]; !ok || v.AsInterface() != want {
			t.Errorf("span %s = %v, want %v", k, v.AsInterface(), want)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	wantBounds := map[string][]float64{
		"gen_ai.server.request.duration":      {0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92},
		"gen_ai.server.time_to_first_token":   {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0},
		"gen_ai.server.time_per_output_token": {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5},
	}
	found := 0
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != openaiproxy.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			bounds, ok := wantBounds[m.Name]
			if !ok {
				continue
			}
			found++
			if m.Unit != "s" {
				t.Errorf("%s unit %q", m.Name, m.Unit)
			}
			dps := m.Data.(metricdata.Histogram[float64]).DataPoints
			if len(dps) != 1 || dps[0].Count != 1 || !slices.Equal(dps[0].Bounds, bounds) {
				t.Fatalf("%s: %+v", m.Name, dps)
			}
			set := dps[0].Attributes
			for k, want := range map[attribute.Key]string{
				"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
				"gen_ai.request.model": model, "gen_ai.response.model": model,
			} {
				if v, _ := set.Value(k); v.AsString() != want {
					t.Errorf("%s %s = %q, want %q", m.Name, k, v.AsString(), want)
				}
			}
			if set.HasValue("error.type") {
				t.Errorf("%s has error.type on success", m.Name)
			}
			if m.Name == "gen_ai.server.time_per_output_token" && (dps[0].Sum < 0.003 || dps[0].Sum > 1) {
				t.Errorf("time per output token %v s, want about the 5 ms pace", dps[0].Sum)
			}
		}
	}
	if found != 3 {
		t.Fatalf("found %d of the 3 GenAI server metrics", found)
	}
}

// TestFailureErrorType checks error.type on a request the backend refuses.
func TestFailureErrorType(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"bad"}`, http.StatusBadRequest)
	}))
	defer backend.Close()
	r := newRigTo(t, backend)
	r.post(t, "/v1/chat/completions", chatRequest(true, ""))
	r.wait(t)
	var rm metricdata.ResourceMetrics
	r.reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "gen_ai.server.time_to_first_token" {
				t.Errorf("time to first token recorded for a failure")
			}
			if m.Name == "gen_ai.server.request.duration" {
				v, _ := m.Data.(metricdata.Histogram[float64]).DataPoints[0].Attributes.Value("error.type")
				if v.AsString() != "400" {
					t.Errorf("error.type %q, want 400", v.AsString())
				}
			}
		}
	}
}

// TestAbsurdUsageIsMalformed: a usage beyond any real response is counted
// as unparsed, is not taken (the request keeps what was counted before it),
// and costs no time, while a large but real one is reported whole.
func TestAbsurdUsageIsMalformed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prompt  string
		want    uint64
		wantOut uint64
	}{
		{"absurd", "4000000000000000000", 0, 0},
		{"large", "20000000", 20_000_000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"}],"usage":{"prompt_tokens":`+tc.prompt+`,"completion_tokens":1,"total_tokens":2}}`)
			}))
			defer backend.Close()
			u, _ := url.Parse(backend.URL)
			mon := newMonitor(t)
			var c counts
			h := otelenergy.NewMiddleware(mon)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider())).ServeHTTP(w, r)
				res := otelenergy.RequestFromContext(r.Context()).End()
				c = counts{res.OutputTokens, res.InputTokens, res.CachedInputTokens}
			}))
			start := time.Now()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)))
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			if c.in != tc.want || c.out != tc.wantOut {
				t.Errorf("reported %d input, %d output tokens; want %d and %d", c.in, c.out, tc.want, tc.wantOut)
			}
		})
	}
}
