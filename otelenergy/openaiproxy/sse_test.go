package openaiproxy

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// recorder is an sseConsumer that keeps the events' data and drops the
// events whose data is "drop".
type recorder struct {
	events  []string
	stopped string
}

func (r *recorder) sseEvent(data []byte) (bool, span) {
	r.events = append(r.events, string(data))
	return string(data) == "drop", span{}
}

func (r *recorder) sseStopped(reason string) { r.stopped = reason }

// referenceSSE frames a whole stream the simple way: split into lines at
// "\r\n", "\n" or "\r", events at empty lines. It returns the events'
// data and, for strip mode, the stream without the events whose data is
// "drop" (an event's bytes run from the end of the previous blank line
// through its own blank line's terminator).
func referenceSSE(body []byte) (events []string, stripped []byte) {
	var data []byte
	hasData := false
	start := 0
	for i := 0; i < len(body); {
		j := i
		for j < len(body) && body[j] != '\n' && body[j] != '\r' {
			j++
		}
		if j == len(body) {
			break // an unterminated line is not read
		}
		line := body[i:j]
		end := j + 1
		if body[j] == '\r' && end < len(body) && body[end] == '\n' {
			end++
		}
		i = end
		if len(line) == 0 {
			drop := false
			if hasData {
				events = append(events, string(data))
				drop = string(data) == "drop"
			}
			if !drop {
				stripped = append(stripped, body[start:end]...)
			}
			data, hasData, start = data[:0], false, end
			continue
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v, _ = bytes.CutPrefix(v, []byte(" "))
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, v...)
			hasData = true
		}
	}
	return events, append(stripped, body[start:]...)
}

// frame feeds body to a framer in pieces of the given sizes (cycled).
func frame(body, sizes []byte, strip bool) (*recorder, []byte) {
	var out bytes.Buffer
	r := &recorder{}
	f := sseFramer{out: &out, strip: strip, c: r}
	for i, rest := 0, body; len(rest) > 0; i++ {
		n := 1
		if len(sizes) > 0 {
			n = int(sizes[i%len(sizes)])%64 + 1
		}
		n = min(n, len(rest))
		f.feed(rest[:n])
		rest = rest[n:]
	}
	f.flushHeld()
	return r, out.Bytes()
}

// FuzzSSEFramer checks the framer alone against referenceSSE: whatever
// the pieces the stream comes in, the same events in both modes, and in
// strip mode the same bytes forwarded.
func FuzzSSEFramer(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: drop\r\n\r\ndata: b\rdata: c\r\r: x\n\n"), []byte{1})
	f.Add([]byte("event: e\ndata:drop\ndata: 2\n\ndata: [DONE]\n\n"), []byte{3, 7})
	f.Add([]byte("data: drop\r\n\r\ntail"), []byte{0, 5})
	f.Fuzz(func(t *testing.T, body, sizes []byte) {
		wantEvents, wantStripped := referenceSSE(body)
		r, out := frame(body, sizes, false)
		if !slices.Equal(r.events, wantEvents) || len(out) != 0 || r.stopped != "" {
			t.Fatalf("read mode: events %q (stopped %q), want %q; wrote %q", r.events, r.stopped, wantEvents, out)
		}
		r, out = frame(body, sizes, true)
		if !slices.Equal(r.events, wantEvents) || !bytes.Equal(out, wantStripped) {
			t.Fatalf("strip mode: events %q, want %q; forwarded %q, want %q", r.events, wantEvents, out, wantStripped)
		}
	})
}

// BenchmarkSSEFramer measures the framer alone on a 256-event stream of
// chat chunks, in writes of one event each, in read and strip mode.
func BenchmarkSSEFramer(b *testing.B) {
	var ev bytes.Buffer
	ev.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}` + "\n\n")
	event := ev.Bytes()
	for _, strip := range []bool{false, true} {
		name := map[bool]string{false: "read", true: "strip"}[strip]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(256 * len(event)))
			var out bytes.Buffer
			for b.Loop() {
				out.Reset()
				f := sseFramer{out: &out, strip: strip, c: &nopConsumer{}}
				for range 256 {
					f.feed(event)
				}
			}
		})
	}
}

type nopConsumer struct{}

func (nopConsumer) sseEvent([]byte) (bool, span) { return false, span{} }
func (nopConsumer) sseStopped(string)            {}

// TestFramerStoppedKeepsLF stops the framer (an event of many comment
// lines past the bound) on a line whose '\r' ends one write, with its
// '\n' at the start of the next: once stopped, every byte passes through
// as it came, that '\n' included.
func TestFramerStoppedKeepsLF(t *testing.T) {
	line := []byte(": " + strings.Repeat("x", 997) + "\r\n") // 1,001 bytes
	k := 2 * DefaultMaxEventBytes / len(line)                // whole lines held before the bound
	var body []byte
	for range k + 3 {
		body = append(body, line...)
	}
	cut := (k+1)*len(line) - 1 // the crossing line's '\r' ends the first write
	var out bytes.Buffer
	f := sseFramer{out: &out, strip: true, c: &nopConsumer{}}
	f.feed(body[:cut])
	if !f.stopped {
		t.Fatalf("the framer did not stop at %d bytes held", cut)
	}
	f.feed(body[cut:])
	f.flushHeld()
	if !bytes.Equal(out.Bytes(), body) {
		t.Fatalf("forwarded %d bytes, want the %d sent, unchanged", out.Len(), len(body))
	}
}
