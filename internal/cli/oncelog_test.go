package cli

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (an OnceLog's
// summaries stop at Close).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestOnceLog: an export failing at every interval is one line, then a
// count; another error gets its own line.
func TestOnceLog(t *testing.T) {
	var out syncBuffer
	o := NewOnceLog(slog.New(slog.NewTextHandler(&out, nil)), "background error")
	refused := errors.New("failed to upload metrics: connection refused")
	for range 5 {
		o.Handle(refused)
	}
	o.Handle(errors.New("read GPU 0: ERROR_UNKNOWN"))
	o.Handle(nil)
	o.Close()
	o.Close()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), out.String())
	}
	for i, want := range []string{
		`msg="background error" error="failed to upload metrics: connection refused"`,
		`msg="background error" error="read GPU 0: ERROR_UNKNOWN"`,
		`msg="background error repeated" error="failed to upload metrics: connection refused" count=4`,
	} {
		if !strings.Contains(lines[i], "level=WARN "+want) {
			t.Errorf("line %d: %s\nwant %s", i, lines[i], want)
		}
	}
}

// TestOnceLogConcurrentSafe handles errors from many goroutines and
// checks that each distinct one is logged once and every repeat counted.
func TestOnceLogConcurrentSafe(t *testing.T) {
	var out syncBuffer
	o := NewOnceLog(slog.New(slog.NewTextHandler(&out, nil)), "e")
	const workers, each, distinct = 8, 200, 4
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				o.Handle(fmt.Errorf("error %d", (w+i)%distinct))
			}
		})
	}
	wg.Wait()
	o.Close()
	s := out.String()
	var repeats int
	for d := range distinct {
		if n := strings.Count(s, fmt.Sprintf(`msg=e error="error %d"`, d)); n != 1 {
			t.Errorf("error %d logged %d times, want once", d, n)
		}
		var n int
		if _, err := fmt.Sscanf(s[strings.Index(s, fmt.Sprintf(`msg="e repeated" error="error %d" count=`, d)):], `msg="e repeated" error="error `+fmt.Sprint(d)+`" count=%d`, &n); err != nil {
			t.Fatalf("no repeat count for error %d: %v\n%s", d, err, s)
		}
		repeats += n
	}
	if want := workers*each - distinct; repeats != want {
		t.Errorf("%d repeats counted, want %d", repeats, want)
	}
}
