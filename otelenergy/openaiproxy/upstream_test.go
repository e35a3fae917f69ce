package openaiproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// openAIError is the body of an OpenAI-style error.
type openAIError struct {
	Error struct {
		Message, Type, Code string
		Param               *string
	}
}

func decodeError(t *testing.T, body []byte) openAIError {
	t.Helper()
	var e openAIError
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Type == "" {
		t.Fatalf("not an OpenAI-style error: %s (%v)", body, err)
	}
	return e
}

// rebuiltContent returns the content of the first choice of a rebuilt
// chat body.
func rebuiltContent(t *testing.T, body []byte) string {
	t.Helper()
	var v struct {
		Object  string
		Choices []struct {
			Message struct{ Role, Content string }
			Finish  string `json:"finish_reason"`
		}
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal(body, &v); err != nil || len(v.Choices) != 1 || v.Object != "chat.completion" {
		t.Fatalf("not a chat completion: %s (%v)", body, err)
	}
	return v.Choices[0].Message.Content
}

func scriptContent(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "tok%d ", i)
	}
	return b.String()
}

// TestUpstreamStreaming sends a non-streaming request: the backend gets
// it as a stream with usage, the client a whole chat.completion body
// with the usage, and the tokens are reported as the chunks pass.
func TestUpstreamStreaming(t *testing.T) {
	s := &script{tokens: 9, prompt: 31, honour: true, seenBody: make(chan []byte, 1)}
	r := newRig(t, s)
	req := chatRequest(false, `"temperature":0,`)
	resp, got := r.post(t, "/v1/chat/completions", req)
	sent := <-s.seenBody
	want := `{"stream_options":{"include_usage":true},` + strings.Replace(req[1:], `"stream":false`, `"stream":true`, 1)
	if string(sent) != want {
		t.Fatalf("upstream got\n%s\nwant\n%s", sent, want)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if c := rebuiltContent(t, got); c != scriptContent(9) {
		t.Fatalf("content %q, want %q", c, scriptContent(9))
	}
	if !bytes.Contains(got, []byte(`"usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40}`)) {
		t.Fatalf("body lacks the stream's usage: %s", got)
	}
	if c := r.wait(t); c.out != 9 || c.in != 31 {
		t.Fatalf("reported %d output, %d input tokens; want the usage, 9 and 31", c.out, c.in)
	}
}

// TestUpstreamStreamingOff keeps the request as the client sent it.
func TestUpstreamStreamingOff(t *testing.T) {
	s := &script{tokens: 9, prompt: 31, honour: true, seenBody: make(chan []byte, 1)}
	r := newRig(t, s, openaiproxy.WithUpstreamStreaming(false))
	req := chatRequest(false, "")
	_, got := r.post(t, "/v1/chat/completions", req)
	if sent := <-s.seenBody; string(sent) != req {
		t.Fatalf("upstream got %s, want the client's body", sent)
	}
	if string(got) != chatJSON(31, 9) {
		t.Fatalf("client received %s", got)
	}
	r.wait(t)
}

// TestStreamingBodyRewrite covers the members the rewrite replaces or
// inserts, wherever they are.
func TestStreamingBodyRewrite(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"model":"m"}`, `{"stream":true,"stream_options":{"include_usage":true},"model":"m"}`},
		{`{"model":"m","stream":false}`, `{"stream_options":{"include_usage":true},"model":"m","stream":true}`},
		{`{"stream" : null , "model":"m"}`, `{"stream_options":{"include_usage":true},"stream" : true , "model":"m"}`},
		{`{"stream_options":{"include_usage":false},"stream":false}`, `{"stream_options":{"include_usage":true},"stream":true}`},
		{`{"stream":false,"x":1,"stream_options":null}`, `{"stream":true,"x":1,"stream_options":{"include_usage":true}}`},
		{` { } `, ` {"stream":true,"stream_options":{"include_usage":true} } `},
	} {
		s := &script{tokens: 1, prompt: 1, honour: true, seenBody: make(chan []byte, 1)}
		r := newRig(t, s)
		r.post(t, "/v1/chat/completions", tc.in)
		if got := string(<-s.seenBody); got != tc.want {
			t.Errorf("%s: upstream got %s, want %s", tc.in, got, tc.want)
		}
		r.wait(t)
	}
}

// streamThen is a backend that streams events, then does what end says.
func streamThen(events []string, end func(w http.ResponseWriter, r *http.Request)) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, e := range events {
			io.WriteString(w, e)
			rc.Flush()
		}
		if end != nil {
			end(w, r)
		}
	}))
}

func hangUp(w http.ResponseWriter, _ *http.Request) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

// TestUpstreamFailuresNeverTruncate: whatever breaks the stream, the
// non-streaming client gets an OpenAI-style error with the status that
// names it, never a 200 with part of a body, and the tokens that passed
// stay counted.
func TestUpstreamFailuresNeverTruncate(t *testing.T) {
	first := []string{chatChunk("a"), chatChunk("b")}
	for _, tc := range []struct {
		name   string
		srv    *httptest.Server
		opts   []openaiproxy.Option
		status int
		typ    string
		msg    string
	}{
		{"error event", streamThen(append(first, `data: {"error":{"message":"CUDA out of memory","type":"internal_error","code":500}}`+"\n\n", done), nil),
			nil, http.StatusBadGateway, "upstream_error", "CUDA out of memory"},
		{"vLLM error object", streamThen(append(first, `data: {"object":"error","message":"engine dead","type":"InternalServerError","code":500}`+"\n\n", done), nil),
			nil, http.StatusBadGateway, "upstream_error", "engine dead"},
		{"backend hangs up", streamThen(first, hangUp), nil, http.StatusBadGateway, "upstream_error", "closed the response"},
		{"stream ends without end", streamThen(first, nil), nil, http.StatusBadGateway, "upstream_error", "closed the response"},
		{"timeout", streamThen(first, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }),
			[]openaiproxy.Option{openaiproxy.WithUpstreamTimeout(50 * time.Millisecond)}, http.StatusGatewayTimeout, "upstream_timeout", "in time"},
		{"too large", streamThen(append(first, chatChunk(strings.Repeat("x", 3000)), finishChunk(), done), nil),
			[]openaiproxy.Option{openaiproxy.WithMaxResponseBytes(2048)}, http.StatusBadGateway, "upstream_error", "2048 bytes"},
		{"budget full", streamThen(append(first, chatChunk("c"), finishChunk(), done), nil),
			[]openaiproxy.Option{openaiproxy.WithBudget(openaiproxy.NewBudget(1000))}, http.StatusServiceUnavailable, "server_busy", "retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRigTo(t, tc.srv, tc.opts...)
			resp, got := r.post(t, "/v1/chat/completions", chatRequest(false, ""))
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d (%q), want %d: %s", resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, got)
			}
			e := decodeError(t, got)
			if e.Error.Type != tc.typ || !strings.Contains(e.Error.Message, tc.msg) {
				t.Fatalf("error %+v, want type %s and %q", e.Error, tc.typ, tc.msg)
			}
			if tc.status == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				t.Fatalf("503 without Retry-After")
			}
			if c := r.wait(t); c.out < 2 {
				t.Fatalf("reported %d output tokens, want the 2 that passed", c.out)
			}
		})
	}
}

// TestUpstreamRefusedResent: a backend that refuses the stream with a
// 400 gets the client's request once more, byte for byte, and the client
// the answer to it; the refusal is logged once for any number of
// requests. A 429 is passed on, not resent.
func TestUpstreamRefusedResent(t *testing.T) {
	var seen []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen = append(seen, string(b))
		if bytes.Contains(b, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Refusal", "1")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"best_of is not supported in streaming","type":"invalid_request_error"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatJSON(12, 3))
	}))
	var logged syncBuf
	r := newRigTo(t, backend, openaiproxy.WithErrorLog(log.New(&logged, "", 0)))
	req := chatRequest(false, `"best_of":2,`)
	for range 3 {
		seen = nil
		resp, got := r.post(t, "/v1/chat/completions", req)
		if resp.StatusCode != 200 || string(got) != chatJSON(12, 3) || resp.Header.Get("X-Refusal") != "" {
			t.Fatalf("status %d, body %s, X-Refusal %q: want the plain request's answer alone", resp.StatusCode, got, resp.Header.Get("X-Refusal"))
		}
		if len(seen) != 2 || seen[1] != req {
			t.Fatalf("backend got %q, want the stream and then the client's request unchanged", seen)
		}
		if c := r.wait(t); c.out != 3 || c.in != 12 {
			t.Fatalf("reported %d output, %d input tokens; want 3 and 12", c.out, c.in)
		}
	}
	if n := strings.Count(logged.String(), "refused it with status 400"); n != 1 {
		t.Fatalf("logged the refusal %d times, want once:\n%s", n, logged.String())
	}

	limited := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Error(w, `{"error":"slow down"}`, http.StatusTooManyRequests)
	}))
	r2 := newRigTo(t, limited)
	if resp, _ := r2.post(t, "/v1/chat/completions", req); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want the backend's 429", resp.StatusCode)
	}
	r2.wait(t)
}

// TestUpstreamJSONAnswerPasses: a backend that ignores "stream" and
// answers with a whole body is read as any non-streaming response.
func TestUpstreamJSONAnswerPasses(t *testing.T) {
	r := newRig(t, &script{tokens: 5, prompt: 8, json: true})
	resp, got := r.post(t, "/v1/chat/completions", chatRequest(false, ""))
	if resp.StatusCode != 200 || string(got) != chatJSON(8, 5) {
		t.Fatalf("status %d, body %s", resp.StatusCode, got)
	}
	if c := r.wait(t); c.out != 5 || c.in != 8 {
		t.Fatalf("reported %d output, %d input tokens", c.out, c.in)
	}
}

// TestUpstreamStreamingConcurrentSafe sends non-streaming and streaming
// requests at once through one proxy, which rebuilds the former's bodies
// and learns one token rate from all of them: every answer is whole and
// its own, and the budget is whole again once they are done.
func TestUpstreamStreamingConcurrentSafe(t *testing.T) {
	budget := openaiproxy.NewBudget(1 << 20)
	s := &script{tokens: 30, prompt: 5, honour: true}
	r := newRig(t, s, openaiproxy.WithBudget(budget))
	r.counts = make(chan counts, 64)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := i%2 == 0
			resp, err := r.client.Post(r.proxy.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatRequest(stream, "")))
			if err != nil {
				errs <- err
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case err != nil:
				errs <- err
			case stream && string(body) != strings.Join(s.events(false), ""):
				errs <- fmt.Errorf("stream %q", body)
			case !stream && !bytes.Contains(body, []byte(`"content":"`+scriptContent(30)+`"`)):
				errs <- fmt.Errorf("rebuilt body %s", body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for range 32 {
		// The prompt's estimate, 10, reported at the first chunk, stays
		// above the usage's 5.
		if c := r.wait(t); c.out != 30 || c.in != 10 {
			t.Fatalf("reported %d output, %d input tokens; want 30 and 10", c.out, c.in)
		}
	}
	if !budget.Take(1 << 20) {
		t.Fatal("the budget was not given back whole")
	}
}

// TestUpstreamClientGone: a non-streaming client that leaves while the
// proxy reads the stream for it ends the exchange as a disconnect, with
// nothing written and nothing left running.
func TestUpstreamClientGone(t *testing.T) {
	s := &script{tokens: 1000, prompt: 4, honour: true, pace: 2 * time.Millisecond, flushed: make(chan int)}
	r := newRig(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The client leaves once the backend has streamed ten tokens, however
	// slow the machine: not after a time that a loaded one may spend
	// before the first.
	go func() {
		for n := range s.flushed {
			if n >= 10 {
				cancel()
				return
			}
		}
	}()
	req, _ := http.NewRequestWithContext(ctx, "POST", r.proxy.URL+"/v1/chat/completions", strings.NewReader(chatRequest(false, "")))
	if _, err := r.client.Do(req); err == nil {
		t.Fatal("the request ended before the client left")
	}
	if c := r.wait(t); c.out == 0 || c.out >= 1000 {
		t.Fatalf("reported %d output tokens, want those that passed before the client left", c.out)
	}
	if u := r.unparsed(t); u[openaiproxy.ReasonClientDisconnect] != 1 {
		t.Fatalf("unparsed %v, want client_disconnect 1", u)
	}
}

// TestUpstreamEncodedStreamResent: a stream in a content coding the proxy
// did not ask for cannot be rebuilt; the client's request is sent again as
// it came.
func TestUpstreamEncodedStreamResent(t *testing.T) {
	var seen []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen = append(seen, string(b))
		if bytes.Contains(b, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, "\x1b\x00compressed")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatJSON(3, 2))
	}))
	r := newRigTo(t, backend, openaiproxy.WithErrorLog(log.New(io.Discard, "", 0)))
	resp, got := r.post(t, "/v1/chat/completions", chatRequest(false, ""))
	if resp.StatusCode != 200 || string(got) != chatJSON(3, 2) || len(seen) != 2 {
		t.Fatalf("status %d, body %s, backend saw %d requests", resp.StatusCode, got, len(seen))
	}
	r.wait(t)
}

// TestUpstreamRefusalBrokenResent: a backend that refuses the stream
// and breaks the connection in the middle of its refusal's body still
// gets the client's request once more; the client never receives an
// empty 200.
func TestUpstreamRefusalBrokenResent(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if bytes.Contains(b, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "200")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"streaming is not`)
			http.NewResponseController(w).Flush()
			hangUp(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatJSON(12, 3))
	}))
	t.Cleanup(backend.Close)
	r := newRigTo(t, backend, openaiproxy.WithErrorLog(log.New(io.Discard, "", 0)))
	resp, got := r.post(t, "/v1/chat/completions", chatRequest(false, ""))
	if resp.StatusCode != 200 || string(got) != chatJSON(12, 3) {
		t.Fatalf("status %d, body %q: want the plain request's answer", resp.StatusCode, got)
	}
	r.wait(t)
}

// heldRequestBody is a request body a stage in front read whole, as
// otelenergy-proxy's body limit does: Bytes returns it in place.
type heldRequestBody struct {
	*strings.Reader
	s string
}

func (h *heldRequestBody) Bytes() []byte { return []byte(h.s[len(h.s)-h.Len():]) }
func (h *heldRequestBody) Close() error  { return nil }

// TestRewrittenBodyWithinBudget: the request body the proxy rewrites
// (upstream streaming, the usage rewrite) is a second copy of the one a
// stage in front holds on the shared Budget, and is held within that
// Budget too. A copy the Budget has no room for is not made: the request
// goes upstream as the client sent it, and is answered, not refused.
func TestRewrittenBodyWithinBudget(t *testing.T) {
	pad := strings.Repeat("x", 200<<10)
	for _, stream := range []bool{false, true} {
		req := chatRequest(stream, `"user":"`+pad+`",`)
		for _, tc := range []struct {
			name    string
			room    int64 // what the Budget has beyond the body the front stage holds
			rewrite bool
		}{{"no room", 16 << 10, false}, {"room", 1 << 20, true}} {
			t.Run(fmt.Sprintf("stream=%t/%s", stream, tc.name), func(t *testing.T) {
				s := &script{tokens: 3, prompt: 5, honour: true, seenBody: make(chan []byte, 1)}
				backend := httptest.NewServer(s)
				t.Cleanup(backend.Close)
				size := int64(len(req)) + tc.room
				budget := openaiproxy.NewBudget(size)
				r := newRigTo(t, backend, openaiproxy.WithBudget(budget))
				front := r.proxy.Config.Handler
				r.proxy.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
					b, _ := io.ReadAll(q.Body)
					if !budget.Take(int64(len(b))) {
						t.Errorf("the front stage found no room for the body")
						return
					}
					defer budget.Give(int64(len(b)))
					q.Body = &heldRequestBody{strings.NewReader(string(b)), string(b)}
					front.ServeHTTP(w, q)
				})
				resp, got := r.post(t, "/v1/chat/completions", req)
				sent := <-s.seenBody
				if rewritten := string(sent) != req; rewritten != tc.rewrite {
					t.Fatalf("the body went upstream rewritten %t, want %t", rewritten, tc.rewrite)
				}
				if resp.StatusCode != 200 || !bytes.Contains(got, []byte("tok")) && !bytes.Contains(got, []byte("hello there")) {
					t.Fatalf("status %d, body %.200s: want the backend's answer", resp.StatusCode, got)
				}
				r.wait(t)
				if !budget.Take(size) {
					t.Fatal("the budget was not given back whole")
				}
			})
		}
	}
}
