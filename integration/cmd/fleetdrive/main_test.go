package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// front is a fake front gateway: an OpenAI-compatible streaming endpoint
// that answers each request with its own trace id and energy trailers and
// records what it sent, the ground truth the output is checked against.
type front struct {
	tokens   int
	noDone   bool // end the body without data: [DONE]
	trailers bool

	mu   sync.Mutex
	n    int
	sent map[string]sent // by trace id
}

type sent struct {
	tenant string
	mj     float64
	approx bool
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Stream    bool `json:"stream"`
		MaxTokens int  `json:"max_tokens"`
	}
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil || !req.Stream {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.n++
	id := fmt.Sprintf("%032x", f.n)
	s := sent{tenant: r.Header.Get("X-Tenant"), mj: 1000 + 0.5*float64(f.n), approx: f.n%2 == 0}
	f.sent[id] = s
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Trace-Id", id)
	if f.trailers {
		w.Header().Set("Trailer", "Energy-Millijoules, Energy-Approximate")
	}
	for i := range min(f.tokens, req.MaxTokens) {
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}]}\n\n", i)
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	if !f.noDone {
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
	// The trailers come after a pause, as a proxy's come after its
	// backend's last byte: a client that stops reading at [DONE] misses them.
	w.(http.Flusher).Flush()
	time.Sleep(20 * time.Millisecond)
	if f.trailers {
		w.Header().Set("Energy-Millijoules", strconv.FormatFloat(s.mj, 'f', -1, 64))
		w.Header().Set("Energy-Approximate", strconv.FormatBool(s.approx))
	}
}

func startFront(t *testing.T, f *front) string {
	f.sent = map[string]sent{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL
}

func runDrive(t *testing.T, args ...string) (int, []result, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	var rs []result
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		rs = append(rs, r)
	}
	return code, rs, stderr.String()
}

// TestRunConcurrentSafe checks each stream's line against what the front
// sent it: tenant, trace id and both trailers.
func TestRunConcurrentSafe(t *testing.T) {
	const streams, tenants, tokens = 30, 3, 8
	f := &front{tokens: tokens, trailers: true}
	url := startFront(t, f)
	code, rs, stderr := runDrive(t, "-url", url, "-streams", strconv.Itoa(streams), "-tokens", strconv.Itoa(tokens),
		"-tenants", strconv.Itoa(tenants), "-timeout", "30s")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if len(rs) != streams || len(f.sent) != streams {
		t.Fatalf("%d lines for %d requests, want %d", len(rs), len(f.sent), streams)
	}
	seen := map[int]bool{}
	perTenant := map[string]int{}
	for _, r := range rs {
		s, ok := f.sent[r.TraceID]
		switch {
		case !ok:
			t.Errorf("stream %d: trace id %q was never sent", r.Stream, r.TraceID)
		case r.Error != "":
			t.Errorf("stream %d: %s", r.Stream, r.Error)
		case r.Tenant != fmt.Sprintf("tenant-%d", r.Stream%tenants) || s.tenant != r.Tenant:
			t.Errorf("stream %d: tenant %q, the front got X-Tenant %q", r.Stream, r.Tenant, s.tenant)
		case r.EnergyMillijoules != s.mj || r.EnergyApproximate != s.approx:
			t.Errorf("stream %d: trailers %v mJ approximate=%v, the front sent %v mJ approximate=%v",
				r.Stream, r.EnergyMillijoules, r.EnergyApproximate, s.mj, s.approx)
		case r.Chunks != tokens || r.Proto != "HTTP/1.1":
			t.Errorf("stream %d: %d chunks over %s, want %d over HTTP/1.1", r.Stream, r.Chunks, r.Proto, tokens)
		}
		seen[r.Stream] = true
		perTenant[r.Tenant]++
	}
	if len(seen) != streams {
		t.Errorf("%d distinct streams in %d lines", len(seen), len(rs))
	}
	for i := range tenants {
		if n := perTenant[fmt.Sprintf("tenant-%d", i)]; n != streams/tenants {
			t.Errorf("tenant-%d: %d streams, want %d", i, n, streams/tenants)
		}
	}
}

// TestRunBadStreams checks that a stream the front got wrong is reported
// on its line and in the exit status.
func TestRunBadStreams(t *testing.T) {
	for _, tc := range []struct {
		name  string
		front *front
		want  string
	}{
		{"cut short", &front{tokens: 4, noDone: true, trailers: true}, "not \"data: [DONE]\\n\\n\""},
		{"no trailers", &front{tokens: 4}, "trailer Energy-Millijoules"},
		{"too few chunks", &front{tokens: 2, trailers: true}, "2 content chunks, want 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := startFront(t, tc.front)
			code, rs, stderr := runDrive(t, "-url", url, "-streams", "3", "-tokens", "4", "-timeout", "30s")
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
			}
			if len(rs) != 3 {
				t.Fatalf("%d lines, want 3", len(rs))
			}
			for _, r := range rs {
				if !strings.Contains(r.Error, tc.want) {
					t.Errorf("stream %d: error %q, want it to contain %q", r.Stream, r.Error, tc.want)
				}
			}
		})
	}
}

// TestRunInterrupted checks that streams cut off by the run's bound are
// reported, each on its line.
func TestRunInterrupted(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	defer close(block)
	began := time.Now()
	code, rs, _ := runDrive(t, "-url", srv.URL, "-streams", "4", "-timeout", "200ms")
	if code != 1 || len(rs) != 4 {
		t.Fatalf("exit %d with %d lines, want 1 with 4", code, len(rs))
	}
	for _, r := range rs {
		if !strings.Contains(r.Error, "context deadline exceeded") {
			t.Errorf("stream %d: error %q, want the deadline", r.Stream, r.Error)
		}
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("the run took %v past its 200ms bound", d)
	}
}

func TestRunFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-url", "http://x", "-streams", "0"},
		{"-url", "http://x", "-tenants", "0"},
		{"-url", "http://x", "extra"},
		{"-bogus"},
	} {
		if code, rs, stderr := runDrive(t, args...); code != 2 || len(rs) != 0 || stderr == "" {
			t.Errorf("%q: exit %d, %d lines, stderr %q; want 2, none and a message", args, code, len(rs), stderr)
		}
	}
}
