package openaiproxy_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Ollama's recordings (testdata/ollama, see testdata/README.md): the same
// request streamed with include_usage (.sse), streamed without it
// (.plain.sse) and not streamed (.json), to Ollama v0.17.4 serving the
// tiny random-weights model at temperature 0 with a seed. Each response
// has an id and a created time of its own.

var idCreated = regexp.MustCompile(`"id":"[^"]*"|"created":[0-9]+`)

// sameButIDs reports whether a and b are equal byte for byte once every id
// and created value is blanked.
func sameButIDs(a, b []byte) bool { return bytes.Equal(blankIDs(a), blankIDs(b)) }

func blankIDs(x []byte) []byte {
	return idCreated.ReplaceAllFunc(x, func(m []byte) []byte {
		if bytes.HasPrefix(m, []byte(`"id"`)) {
			return []byte(`"id":""`)
		}
		return []byte(`"created":0`)
	})
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRebuiltMatchesOllama: the body the proxy rebuilds from Ollama's
// stream equals Ollama's own non-streaming body for the same request but
// for id and created: byte for byte for chat, with and without logprobs;
// as JSON values for completions, whose chunks name their members in
// another order than the body does (Ollama v0.17.4 gives no logprobs on
// /v1/completions).
func TestRebuiltMatchesOllama(t *testing.T) {
	for _, c := range []string{"chat", "chat-logprobs", "completion"} {
		t.Run(c, func(t *testing.T) {
			p := pair{c, readFile(t, "testdata/ollama/"+c+".sse"), readFile(t, "testdata/ollama/"+c+".json")}
			r := newRigTo(t, httptest.NewServer(pairBackend(p, nil)))
			path := "/v1/chat/completions"
			if c == "completion" {
				path = "/v1/completions"
			}
			req := readFile(t, "testdata/ollama/"+c+".request.json")
			resp, got := r.post(t, path, string(req))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			want := bytes.TrimSuffix(p.body, []byte("\n"))
			if c == "completion" {
				if d := jsonEqual(blankIDs(got), blankIDs(want), nil); d != "" {
					t.Fatalf("rebuilt body differs from Ollama's: %s\n%s\n%s", d, got, want)
				}
			} else if !sameButIDs(got, want) {
				t.Fatalf("rebuilt body\n%s\nOllama's\n%s", got, want)
			}
			r.wait(t)
		})
	}
}

// TestStripOllamaAndVLLM: a streaming client that did not ask for usage
// receives, once the proxy has asked for it, the bytes the backend sends
// without it: Ollama's zeroed "usage" in every /v1/completions chunk is
// cut, the usage chunk dropped; vLLM's chunks, which carry no usage, pass
// as they came; OpenAI's "usage":null in every chunk is cut.
func TestStripOllamaAndVLLM(t *testing.T) {
	for _, c := range []struct{ name, stream, plain, path string }{
		{"ollama/completion", "testdata/ollama/completion.sse", "testdata/ollama/completion.plain.sse", "/v1/completions"},
		{"ollama/chat", "testdata/ollama/chat.sse", "testdata/ollama/chat.plain.sse", "/v1/chat/completions"},
		{"vllm/chat", "testdata/pairs/vllm/chat-reasoning-cached.sse", "", "/v1/chat/completions"},
		{"vllm/completion", "testdata/pairs/vllm/completion-n2-logprobs.sse", "", "/v1/completions"},
		{"openai/chat", "testdata/pairs/openai/chat-logprobs-cached.sse", "", "/v1/chat/completions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream := readFile(t, c.stream)
			var want []byte
			if c.plain != "" {
				want = readFile(t, c.plain)
			} else {
				// The stream without the rewrite: the chunks less the
				// last one, whose choices are empty, and less OpenAI's
				// "usage":null.
				evs := bytes.SplitAfter(stream, []byte("\n\n"))
				for _, e := range evs {
					if !bytes.Contains(e, []byte(`"choices":[]`)) {
						want = append(want, bytes.ReplaceAll(e, []byte(`,"usage":null`), nil)...)
					}
				}
			}
			p := pair{c.name, stream, nil}
			r := newRigTo(t, httptest.NewServer(pairBackend(p, nil)))
			req := chatRequest(true, "")
			if strings.HasSuffix(c.path, "/completions") && !strings.Contains(c.path, "chat") {
				req = `{"model":"m","prompt":"x","stream":true}`
			}
			_, got := r.post(t, c.path, req)
			if !sameButIDs(got, want) {
				t.Fatalf("client received\n%s\nwant\n%s", got, want)
			}
			if bytes.Contains(got, []byte(`"usage"`)) {
				t.Fatalf("a usage reached the client")
			}
			r.wait(t)
		})
	}
}
