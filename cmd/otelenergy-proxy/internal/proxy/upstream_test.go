package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestUpstreamStreamFlag: by default a non-streaming completion goes to
// the backend as a stream and the client gets the whole body rebuilt from
// it, application/json with the energy trailers; -upstream-stream=false
// sends it as it came.
func TestUpstreamStreamFlag(t *testing.T) {
	for _, on := range []bool{true, false} {
		seen := make(chan []byte, 8)
		be := &backend{tokens: 4, pace: time.Millisecond}
		b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/chat/completions" {
				body, _ := io.ReadAll(r.Body)
				seen <- body
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			be.ServeHTTP(w, r)
		}))
		t.Cleanup(b.Close)
		args := []string{"-simulate", "-backend", b.URL}
		if !on {
			args = append(args, "-upstream-stream=false")
		}
		r := start(t, args, nil)
		waitReady(t, r.admin)
		resp, body := post(t, context.Background(), &http.Client{}, r.api, false)
		sent := <-seen
		if streamed := bytes.Contains(sent, []byte(`"stream":true`)) && bytes.Contains(sent, []byte(`"include_usage":true`)); streamed != on {
			t.Fatalf("-upstream-stream %t: the backend got %s", on, sent)
		}
		var got struct {
			Object  string
			Choices []struct{ Message struct{ Content string } }
			Usage   struct {
				Completion int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" ||
			got.Object != "chat.completion" || len(got.Choices) != 1 || got.Usage.Completion != 4 {
			t.Fatalf("-upstream-stream %t: status %d (%s), body %s (%v)", on, resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
		}
		want := "hi hi hi hi "
		if on {
			want = "t0 t1 t2 t3 " // the stream's content, as rebuilt
		}
		if got.Choices[0].Message.Content != want {
			t.Fatalf("-upstream-stream %t: content %q, want %q", on, got.Choices[0].Message.Content, want)
		}
		if resp.Trailer.Get("Energy-Approximate") == "" || resp.Trailer.Get("Energy-Millijoules") == "" {
			t.Fatalf("-upstream-stream %t: trailers %v", on, resp.Trailer)
		}
	}
}
