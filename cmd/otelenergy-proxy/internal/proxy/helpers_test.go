package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// backend is an OpenAI-compatible server: /v1/models, and chat
// completions streamed one token per chunk (with the usage chunk when
// asked) or whole.
type backend struct {
	tokens int
	pace   time.Duration
	// block, when set, holds each completion until the request's context
	// ends, and reports that end on canceled.
	block    bool
	canceled chan struct{}
	started  chan struct{}
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		return
	case "/v1/chat/completions":
	default:
		http.NotFound(w, r)
		return
	}
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if b.started != nil {
		b.started <- struct{}{}
	}
	if b.block {
		<-r.Context().Done()
		b.canceled <- struct{}{}
		return
	}
	n := max(b.tokens, 1)
	if !req.Stream {
		time.Sleep(b.pace * time.Duration(n))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"%s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}`,
			strings.Repeat("hi ", n), n, n+7)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for i := range n {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(b.pace):
		}
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i)
		rc.Flush()
	}
	io.WriteString(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	if req.StreamOptions.IncludeUsage {
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", n, n+7)
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

const chatBody = `{"model":"m","stream":%t,"messages":[{"role":"user","content":"hello"}]}`

// collector is an OTLP/HTTP receiver that keeps what it was sent.
type collector struct {
	srv *httptest.Server

	mu      sync.Mutex
	spans   []*tracepb.Span
	res     []*commonpb.KeyValue // resource of the last export
	metrics []*metricspb.Metric  // of the last export, cumulative
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		defer c.mu.Unlock()
		switch r.URL.Path {
		case "/v1/traces":
			var req collectortrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			for _, rs := range req.ResourceSpans {
				c.res = rs.Resource.Attributes
				for _, ss := range rs.ScopeSpans {
					c.spans = append(c.spans, ss.Spans...)
				}
			}
		case "/v1/metrics":
			var req collectormetrics.ExportMetricsServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			c.metrics = nil
			for _, rm := range req.ResourceMetrics {
				c.res = rm.Resource.Attributes
				for _, sm := range rm.ScopeMetrics {
					c.metrics = append(c.metrics, sm.Metrics...)
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	return c
}

func attr(kvs []*commonpb.KeyValue, key string) (*commonpb.AnyValue, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// serverSpans returns the server spans received so far.
func (c *collector) serverSpans() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
			out = append(out, s)
		}
	}
	return out
}

// running is a proxy run in-process.
type running struct {
	api, admin string
	stderr     *syncBuffer
	sig        chan os.Signal
	code       chan int
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs Main with args and env (the OTELENERGY_* variables) until
// it serves, and stops it with SIGTERM when the test ends.
func start(t *testing.T, args []string, env map[string]string) *running {
	t.Helper()
	return startEnv(t, args, env, nil)
}

// newTestBackend serves the test backend until the test ends.
func newTestBackend(t *testing.T) string {
	b := httptest.NewServer(&backend{tokens: 3, pace: 5 * time.Millisecond})
	t.Cleanup(b.Close)
	return b.URL
}

// startEnv is start with edit applied to the Env.
func startEnv(t *testing.T, args []string, env map[string]string, edit func(*Env)) *running {
	t.Helper()
	r := &running{stderr: &syncBuffer{}, sig: make(chan os.Signal, 2), code: make(chan int, 1)}
	addrs := make(chan [2]string, 1)
	args = append([]string{"-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-shutdown-delay", "0"}, args...)
	e := Env{
		LookupEnv: func(k string) (string, bool) {
			if v, ok := env[k]; ok {
				return v, true
			}
			return os.LookupEnv(k) // the OTEL_* variables newCollector sets
		},
		Signals: r.sig,
		Started: func(api, admin net.Addr) { addrs <- [2]string{"http://" + api.String(), "http://" + admin.String()} },
	}
	e.Stdout, e.Stderr = r.stderr, r.stderr
	if edit != nil {
		edit(&e)
	}
	go func() { r.code <- Main(args, e) }()
	select {
	case a := <-addrs:
		r.api, r.admin = a[0], a[1]
	case code := <-r.code:
		t.Fatalf("the proxy exited with status %d before serving:\n%s", code, r.stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("the proxy did not start:\n%s", r.stderr)
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop sends SIGTERM once and returns the exit status.
func (r *running) stop(t *testing.T) int {
	select {
	case r.sig <- syscall.SIGTERM:
	default:
	}
	select {
	case c := <-r.code:
		r.code <- c
		return c
	case <-time.After(60 * time.Second):
		t.Fatalf("the proxy did not exit:\n%s", r.stderr)
		return -1
	}
}

func waitReady(t *testing.T, admin string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30 s: %v %v", resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func post(t *testing.T, ctx context.Context, c *http.Client, url string, stream bool) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(chatBody, stream)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}
