package openaiproxy_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// serveSplit runs the middleware around a handler that writes body in
// pieces of the given sizes (cycled) and returns what the client received.
func serveSplit(t testing.TB, body []byte, sizes []byte, includeUsage bool) []byte {
	mon := newMonitor(t)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rest := body
		for i := 0; len(rest) > 0; i++ {
			n := 1
			if len(sizes) > 0 {
				n = int(sizes[i%len(sizes)])%64 + 1
			}
			n = min(n, len(rest))
			w.Write(rest[:n])
			w.(http.Flusher).Flush()
			rest = rest[n:]
		}
	})
	h := openaiproxy.NewMiddleware(mon, openaiproxy.WithIncludeUsage(includeUsage),
		openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider()))(inner)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatRequest(true, ""))))
	return rec.Body.Bytes()
}

// TestStripAcrossSplitWrites removes the usage chunk from a CRLF stream
// written one byte at a time and in uneven pieces.
func TestStripAcrossSplitWrites(t *testing.T) {
	crlf := func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
	for _, tc := range []struct{ name, sep string }{{"lf", "\n"}, {"crlf", "\r\n"}, {"cr", "\r"}} {
		conv := func(s string) string { return strings.ReplaceAll(s, "\n", tc.sep) }
		_ = crlf
		before := conv(chatChunk("a") + ": keep-alive\n\n" + chatChunk("b") + finishChunk())
		usage := conv(usageChunk(3, 2))
		after := conv(done)
		for _, sizes := range [][]byte{nil, {2, 5, 1}, {63}} {
			got := serveSplit(t, []byte(before+usage+after), sizes, true)
			if string(got) != before+after {
				t.Fatalf("%s %v: client received %q, want %q", tc.name, sizes, got, before+after)
			}
		}
	}
}

// FuzzSSE feeds arbitrary streams in arbitrary pieces. Without the rewrite
// the client receives every byte unchanged; with it, only a stream holding
// a usage object may differ, and then only by losing bytes.
func FuzzSSE(f *testing.F) {
	f.Add([]byte(chatChunk("a")+usageChunk(1, 1)+done), []byte{3, 7})
	f.Add([]byte("data: {\"choices\":[],\"usage\":{}}\r\n\r\ndata: x\r"), []byte{1})
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"\\u00e9\"}}]}\n\n"), []byte{})
	f.Add([]byte(": c\n\nevent: e\ndata: [DONE]\n\n"), []byte{0})
	f.Fuzz(func(t *testing.T, body, sizes []byte) {
		if got := serveSplit(t, body, sizes, false); !bytes.Equal(got, body) {
			t.Fatalf("passthrough changed bytes:\n%q\n%q", body, got)
		}
		got := serveSplit(t, body, sizes, true)
		if !bytes.Equal(got, body) && (!bytes.Contains(body, []byte(`"usage"`)) || len(got) >= len(body)) {
			t.Fatalf("strip mode changed a stream with no usage chunk:\n%q\n%q", body, got)
		}
	})
}
