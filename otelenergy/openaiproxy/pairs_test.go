package openaiproxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// pair is a recorded pair (testdata/pairs, see its README): the stream a
// server sends for a request with "stream":true and
// "stream_options":{"include_usage":true}, and the body it returns for the
// same request without them.
type pair struct {
	name         string
	stream, body []byte
}

func loadPairs(t *testing.T, dir string) []pair {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.sse"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no pairs under %s: %v", dir, err)
	}
	var ps []pair
	for _, f := range files {
		s, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(strings.TrimSuffix(f, ".sse") + ".json")
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, f)
		ps = append(ps, pair{strings.TrimSuffix(filepath.ToSlash(rel), ".sse"), s, b})
	}
	return ps
}

// pairBackend serves p's stream to a request that streams and p's body to
// one that does not, as the recorded server would.
func pairBackend(p pair, seen chan<- []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if seen != nil {
			seen <- body
		}
		var req struct {
			Stream bool `json:"stream"`
		}
		json.Unmarshal(body, &req)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			w.Write(p.body)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, ev := range bytes.SplitAfter(p.stream, []byte("\n\n")) {
			w.Write(ev)
			rc.Flush()
		}
	})
}

// knownDifferences are the members, by pair, that a server's
// non-streaming body has and its stream never states, other than null or
// empty ones (see jsonEqual). testdata/pairs/README.md gives each.
var knownDifferences = map[string][]string{
	// SGLang's non-streaming tool calls keep the index their stream
	// merges them by; OpenAI's, vLLM's and TGI's do not, and the
	// rebuilt calls follow them.
	"sglang/tools": {"choices.*.message.tool_calls.*.index"},
}

// TestRebuiltBodyMatchesRecordedPairs sends each recorded pair's request
// without streaming through the proxy, which asks the backend to stream,
// and compares the body the client receives with the server's own
// non-streaming body, and the tokens reported with its usage.
func TestRebuiltBodyMatchesRecordedPairs(t *testing.T) {
	for _, p := range loadPairs(t, "testdata/pairs") {
		t.Run(p.name, func(t *testing.T) {
			seen := make(chan []byte, 1)
			r := newRigTo(t, httptest.NewServer(pairBackend(p, seen)))
			path := "/v1/chat/completions"
			req := chatRequest(false, "")
			if strings.Contains(p.name, "completion-") {
				path, req = "/v1/completions", `{"model":"m","prompt":"Say hello"}`
			}
			resp, got := r.post(t, path, req)
			if sent := <-seen; !bytes.Contains(sent, []byte(`"stream":true`)) || !bytes.Contains(sent, []byte(`"stream_options":{"include_usage":true}`)) {
				t.Fatalf("upstream request %s does not stream with usage", sent)
			}
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d, Content-Type %q; body %s", resp.StatusCode, resp.Header.Get("Content-Type"), got)
			}
			if cl := resp.ContentLength; cl != int64(len(got)) {
				t.Errorf("Content-Length %d for %d bytes", cl, len(got))
			}
			if err := jsonEqual(got, p.body, knownDifferences[p.name]); err != "" {
				t.Fatalf("rebuilt body differs from the server's own: %s\n got %s\nwant %s", err, got, p.body)
			}
			var usage struct {
				Usage struct {
					Prompt     uint64 `json:"prompt_tokens"`
					Completion uint64 `json:"completion_tokens"`
					Details    struct {
						Cached uint64 `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			json.Unmarshal(p.body, &usage)
			// The input tokens are the usage's or the prompt's estimate,
			// whichever is higher; the cached ones are the usage's.
			if c := r.wait(t); c.out != usage.Usage.Completion || c.in < usage.Usage.Prompt || c.cached != usage.Usage.Details.Cached {
				t.Fatalf("reported %d output, %d input, %d cached tokens; usage %+v", c.out, c.in, c.cached, usage.Usage)
			}
			if u := r.unparsed(t); len(u) != 0 {
				t.Fatalf("unparsed %v", u)
			}
		})
	}
}

// jsonEqual compares two JSON documents as values, where a member whose
// value is null or an empty array or object equals an absent one (a
// client reads them alike; a stream states no such member it has nothing
// for), and members at the paths in skip (dot-separated keys, * for any
// array element) are not compared. It returns "" when they are equal, or
// where they differ.
func jsonEqual(a, b []byte, skip []string) string {
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return "first is not JSON: " + err.Error()
	}
	if err := json.Unmarshal(b, &y); err != nil {
		return "second is not JSON: " + err.Error()
	}
	x, y = normalizeJSON(x, "", skip), normalizeJSON(y, "", skip)
	if reflect.DeepEqual(x, y) {
		return ""
	}
	return diffJSON(x, y, "$")
}

func normalizeJSON(v any, path string, skip []string) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			p := strings.TrimPrefix(path+"."+k, ".")
			if matchPath(p, skip) {
				continue
			}
			e = normalizeJSON(e, p, skip)
			switch ev := e.(type) {
			case nil:
				continue
			case []any:
				if len(ev) == 0 {
					continue
				}
			case map[string]any:
				if len(ev) == 0 {
					continue
				}
			}
			out[k] = e
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalizeJSON(e, path+".*", skip)
		}
		return out
	}
	return v
}

func matchPath(p string, skip []string) bool {
	for _, s := range skip {
		if s == p {
			return true
		}
	}
	return false
}

func diffJSON(x, y any, at string) string {
	switch xv := x.(type) {
	case map[string]any:
		yv, ok := y.(map[string]any)
		if !ok {
			return at + ": object against " + jsonText(y)
		}
		for k := range xv {
			if _, ok := yv[k]; !ok {
				return at + "." + k + ": only in the first"
			}
		}
		for k := range yv {
			if _, ok := xv[k]; !ok {
				return at + "." + k + ": only in the second"
			}
			if d := diffJSON(xv[k], yv[k], at+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		yv, ok := y.([]any)
		if !ok || len(xv) != len(yv) {
			return at + ": " + jsonText(x) + " against " + jsonText(y)
		}
		for i := range xv {
			if d := diffJSON(xv[i], yv[i], at+".*"); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(x, y) {
		return at + ": " + jsonText(x) + " against " + jsonText(y)
	}
	return ""
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

var _ = openaiproxy.WithUpstreamStreaming
