package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestOpenAIRequestShapes sends the request shapes OpenAI clients send to
// the demo's API, unmetered, and checks each answer's shape.
func TestOpenAIRequestShapes(t *testing.T) {
	srv := httptest.NewServer(newServer(nil, nil, 1000))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		name, path, body string
		stream           bool
		object           string
		prompt           float64
	}{
		{name: "prompt string", path: "/v1/completions", body: `{"model":"m","prompt":"hi"}`, object: "text_completion", prompt: 1},
		{name: "prompt list", path: "/v1/completions", body: `{"model":"m","prompt":["abcdef","abc"],"max_tokens":3}`, object: "text_completion", prompt: 3},
		{name: "prompt ids", path: "/v1/completions", body: `{"model":"m","prompt":[1,2,3,4],"max_tokens":2}`, object: "text_completion", prompt: 4},
		{name: "prompt stream", path: "/v1/completions", body: `{"model":"m","prompt":"hi","max_tokens":3,"stream":true}`, stream: true, object: "text_completion"},
		{name: "messages", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, object: "chat.completion", prompt: 5},
		{name: "message parts", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}]}`, object: "chat.completion", prompt: 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+c.path, "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if c.stream {
				var events int
				sc := bufio.NewScanner(resp.Body)
				last := ""
				for sc.Scan() {
					if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
						events++
						last = d
						if d != "[DONE]" && !strings.Contains(d, `"object":"text_completion"`) {
							t.Fatalf("event %s", d)
						}
					}
				}
				if events != 3+2 || last != "[DONE]" {
					t.Fatalf("%d events ending %q, want 3 tokens, the final chunk and [DONE]", events, last)
				}
				return
			}
			var out struct {
				Object string
				Usage  struct {
					PromptTokens float64 `json:"prompt_tokens"`
				}
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Object != c.object || out.Usage.PromptTokens != c.prompt {
				t.Fatalf("%+v %v: want object %s with %v prompt tokens", out, err, c.object, c.prompt)
			}
		})
	}
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":{"x":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a prompt object: status %d, want 400", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if list.Object != "list" || len(list.Data) != len(models) || list.Data[0].ID != models[0] || list.Data[0].Object != "model" {
		t.Fatalf("/v1/models: %+v", list)
	}
}

// TestServeUnmetered runs the demo with -meter=false: it serves and
// prints no energy of its own.
func TestServeUnmetered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := run(ctx, options{addr: "127.0.0.1:0", meter: false, load: true, concurrency: 2, tokenRate: 100}); err != nil {
		t.Fatal(err)
	}
}
