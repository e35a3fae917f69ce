package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingBackend counts the requests and body bytes that reach it, and
// holds each request until release is closed, when set.
type countingBackend struct {
	requests atomic.Int64
	bytes    atomic.Int64
	arrived  chan struct{}
	release  chan struct{}
}

func (b *countingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		return // readiness polls
	}
	b.requests.Add(1)
	n, _ := io.Copy(io.Discard, r.Body)
	b.bytes.Add(n)
	if b.arrived != nil {
		b.arrived <- struct{}{}
	}
	if b.release != nil {
		<-b.release
	}
	io.WriteString(w, "{}")
}

// TestChunkedBodyRefusedBeforeForwarding sends a chunked body above
// -max-request-bytes: the client gets 413 and the backend nothing, where
// the body used to be forwarded up to the limit first.
func TestChunkedBodyRefusedBeforeForwarding(t *testing.T) {
	be := &countingBackend{}
	b := httptest.NewServer(be)
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-max-request-bytes", "100000"}, nil)
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings"} {
		pr, pw := io.Pipe()
		go func() {
			for range 20 { // 20 × 10 kB, twice the limit
				if _, err := pw.Write([]byte(strings.Repeat("x", 10000))); err != nil {
					return
				}
			}
			pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, r.api+path, pr)
		req.ContentLength = -1
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		pr.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || be.requests.Load() != 0 {
			t.Fatalf("%s: status %d, backend saw %d requests and %d bytes; want 413 and nothing forwarded", path, resp.StatusCode, be.requests.Load(), be.bytes.Load())
		}
	}
}

// TestBodyMemoryBound holds one request with a 1,000-byte body at the
// backend under -max-buffered-bytes 1500: a second such body does not fit
// and gets 503 with Retry-After; once the first ends, it fits again.
func TestBodyMemoryBound(t *testing.T) {
	be := &countingBackend{arrived: make(chan struct{}, 1), release: make(chan struct{})}
	b := httptest.NewServer(be)
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-max-request-bytes", "1000", "-max-buffered-bytes", "1500"}, nil)
	body := fmt.Sprintf(`{"model":"m","prompt":%q}`, strings.Repeat("x", 900))
	send := func() *http.Response {
		resp, err := http.Post(r.api+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	var first *http.Response
	done := make(chan struct{})
	go func() { first = send(); close(done) }()
	<-be.arrived
	resp := send()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a body over the memory bound: status %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(be.release)
	<-done
	if first.StatusCode != 200 {
		t.Fatalf("the first request: %d", first.StatusCode)
	}
	be.arrived = nil
	if resp := send(); resp.StatusCode != 200 {
		t.Fatalf("after the first ended: %d, want 200", resp.StatusCode)
	}
}

// TestHeldBodyParsedInPlace checks that the completion's body reaches the
// backend whole through the held body, usage rewrite included.
func TestHeldBodyParsedInPlace(t *testing.T) {
	got := make(chan map[string]any, 1)
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			return // readiness polls
		}
		var m map[string]any
		json.NewDecoder(r.Body).Decode(&m)
		got <- m
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.api+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	m := <-got
	if m["model"] != "m" || m["stream_options"] == nil {
		t.Fatalf("the backend got %v: want the body with stream_options added", m)
	}
}

// TestDeclaredLengthHoldsWhatArrives opens a connection that declares a
// body of the full limit and sends ten bytes of it: it holds one step of
// the memory bound, not the whole declared length, so a second request
// with a large body still fits and is proxied.
func TestDeclaredLengthHoldsWhatArrives(t *testing.T) {
	be := &countingBackend{}
	b := httptest.NewServer(be)
	t.Cleanup(b.Close)
	const limit = 1 << 20
	r := start(t, []string{"-simulate", "-backend", b.URL, "-max-request-bytes", fmt.Sprint(limit), "-max-buffered-bytes", fmt.Sprint(limit + limit/2)}, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.api, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":", limit)
	time.Sleep(300 * time.Millisecond) // the proxy reads the headers and begins the body
	body := fmt.Sprintf(`{"model":"m","prompt":%q}`, strings.Repeat("x", 900<<10))
	resp, err := http.Post(r.api+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a 900 KiB body beside a stalled 1 MiB declaration: status %d, want 200", resp.StatusCode)
	}
}

// TestEqualLimits sets -max-request-bytes and -max-buffered-bytes alike:
// a body of exactly that size is proxied, declared or chunked, and a
// chunked body one byte over gets 413, not a 503 to retry.
func TestEqualLimits(t *testing.T) {
	be := &countingBackend{}
	b := httptest.NewServer(be)
	t.Cleanup(b.Close)
	const limit = 4000
	r := start(t, []string{"-simulate", "-backend", b.URL, "-max-request-bytes", fmt.Sprint(limit), "-max-buffered-bytes", fmt.Sprint(limit)}, nil)
	bodyOf := func(n int) string {
		head := `{"model":"m","prompt":"`
		return head + strings.Repeat("x", n-len(head)-2) + `"}`
	}
	for _, c := range []struct {
		name    string
		size    int
		chunked bool
		want    int
	}{
		{"declared, the full size", limit, false, http.StatusOK},
		{"chunked, the full size", limit, true, http.StatusOK},
		{"chunked, one byte over", limit + 1, true, http.StatusRequestEntityTooLarge},
	} {
		var rd io.Reader = strings.NewReader(bodyOf(c.size))
		if c.chunked {
			rd = io.MultiReader(rd) // hides the length: sent chunked
		}
		req, _ := http.NewRequest(http.MethodPost, r.api+"/v1/completions", rd)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("%s: status %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
}
