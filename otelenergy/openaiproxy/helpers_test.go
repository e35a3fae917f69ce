package openaiproxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
	"github.com/otelenergy/otelenergy/simgpu"
)

// newMonitor returns a Monitor over a simulated GPU. It is the one place
// the tests build a source.
func newMonitor(t testing.TB, opts ...otelenergy.Option) *otelenergy.Monitor {
	t.Helper()
	src, err := simgpu.New(simgpu.Config{Devices: 1})
	if err != nil {
		t.Fatal(err)
	}
	mon, err := otelenergy.NewMonitor(src, append([]otelenergy.Option{otelenergy.WithMeterProvider(sdkmetric.NewMeterProvider())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mon.Shutdown(context.Background()) })
	return mon
}

const model = "llama-3.1-8b-instruct"

func chatChunk(content string) string {
	return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", model, content)
}

func finishChunk() string {
	return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n", model)
}

func usageChunk(prompt, completion int) string {
	return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", model, prompt, completion, prompt+completion)
}

const done = "data: [DONE]\n\n"

// script is what the test backend streams. Events are written and flushed
// one at a time.
type script struct {
	tokens   int
	prompt   int
	usageTo  func(includeUsage bool) bool // whether to send the usage chunk
	dieAfter int                          // close the connection after this many tokens (0: never)
	pace     time.Duration
	gzipBody []byte // sent as is with Content-Encoding: gzip
	json     bool   // a non-streaming response, whatever the request asks
	// honour: a non-streaming response to a request that does not
	// stream, the stream to one that does, as real servers answer.
	honour   bool
	seenBody chan []byte
	// flushed, when set, is sent how many events of a stream have been
	// flushed, after each (dropped when nobody is reading).
	flushed chan int
}

// events returns the stream the backend sends when includeUsage is set.
func (s *script) events(includeUsage bool) []string {
	var ev []string
	for i := range s.tokens {
		ev = append(ev, chatChunk(fmt.Sprintf("tok%d ", i)))
	}
	ev = append(ev, finishChunk())
	if includeUsage {
		ev = append(ev, usageChunk(s.prompt, s.tokens))
	}
	return append(ev, done)
}

func chatJSON(prompt, completion int) string {
	return fmt.Sprintf(`{"id":"c2","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, model, prompt, completion, prompt+completion)
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if s.seenBody != nil {
		s.seenBody <- body
	}
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	json.Unmarshal(body, &req)
	if s.json || (s.honour && !req.Stream) {
		for range s.tokens {
			if !s.honour || s.pace == 0 {
				break
			}
			// A whole body comes once every token is generated, each
			// paced as the stream's are.
			select {
			case <-r.Context().Done():
				return
			case <-time.After(s.pace):
			}
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatJSON(s.prompt, s.tokens))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if s.gzipBody != nil {
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(s.gzipBody)
		return
	}
	rc := http.NewResponseController(w)
	for i, e := range s.events(req.StreamOptions.IncludeUsage) {
		if s.dieAfter > 0 && i == s.dieAfter {
			conn, _, err := rc.Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		if s.pace > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(s.pace):
			}
		}
		io.WriteString(w, e)
		rc.Flush()
		if s.flushed != nil {
			select {
			case s.flushed <- i + 1:
			default:
			}
		}
	}
}

// counts is what a request reported on the Monitor.
type counts struct{ out, in, cached uint64 }

// rig is a backend, the proxy in front of it, and what the proxy reported.
type rig struct {
	backend *httptest.Server
	proxy   *httptest.Server
	reader  *sdkmetric.ManualReader
	mp      *sdkmetric.MeterProvider
	counts  chan counts
	client  *http.Client
}

func newRig(t *testing.T, s *script, opts ...openaiproxy.Option) *rig {
	t.Helper()
	r := &rig{reader: sdkmetric.NewManualReader(), counts: make(chan counts, 1)}
	r.backend = httptest.NewServer(s)
	t.Cleanup(r.backend.Close)
	u, _ := url.Parse(r.backend.URL)
	mon := newMonitor(t)
	r.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	opts = append([]openaiproxy.Option{openaiproxy.WithMeterProvider(r.mp)}, opts...)
	p := openaiproxy.New(u, mon, opts...)
	capture := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		defer func() {
			// End is idempotent: the middleware's own End, which follows,
			// reports the same request.
			res := otelenergy.RequestFromContext(req.Context()).End()
			r.counts <- counts{res.OutputTokens, res.InputTokens, res.CachedInputTokens}
		}()
		p.ServeHTTP(w, req)
	})
	r.proxy = httptest.NewServer(otelenergy.NewMiddleware(mon)(capture))
	t.Cleanup(r.proxy.Close)
	r.client = &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(r.client.CloseIdleConnections)
	return r
}

func (r *rig) post(t *testing.T, path, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := r.client.Post(r.proxy.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (r *rig) wait(t *testing.T) counts {
	t.Helper()
	select {
	case c := <-r.counts:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the proxied request did not end")
		return counts{}
	}
}

// unparsed returns otelenergy.proxy.unparsed by reason.
func (r *rig) unparsed(t *testing.T) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "otelenergy.proxy.unparsed" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key("reason"))
				got[v.AsString()] += dp.Value
			}
		}
	}
	return got
}

func chatRequest(stream bool, extra string) string {
	return fmt.Sprintf(`{"model":%q,"stream":%t,%s"messages":[{"role":"user","content":"Say hello to the energy meter, please."}]}`, model, stream, extra)
}
