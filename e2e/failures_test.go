package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// A failing end-to-end test logs the tails of every process it started
// after its failure message, and CI keeps only the end of the output; so
// the tests fail through fatalf, fatal and errorf, which remember the
// message, and summarize repeats what its test and subtests failed on as
// its last line.
var failures = struct {
	sync.Mutex
	byTest map[string][]string // top-level test name -> messages
}{byTest: map[string][]string{}}

func remember(t testing.TB, msg string) {
	root, _, _ := strings.Cut(t.Name(), "/")
	failures.Lock()
	failures.byTest[root] = append(failures.byTest[root], t.Name()+": "+msg)
	failures.Unlock()
}

func fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	remember(t, msg)
	t.Fatal(msg)
}

func fatal(t testing.TB, args ...any) {
	t.Helper()
	msg := fmt.Sprint(args...)
	remember(t, msg)
	t.Fatal(msg)
}

func errorf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	remember(t, msg)
	t.Error(msg)
}

// summarize registers, as t's first cleanup and so its last to run, a log
// of every failure remembered for t. Call it first in a top-level test.
func summarize(t *testing.T) {
	t.Cleanup(func() {
		failures.Lock()
		msgs := failures.byTest[t.Name()]
		delete(failures.byTest, t.Name())
		failures.Unlock()
		if len(msgs) > 0 {
			t.Logf("%s failed on:\n\t%s", t.Name(), strings.Join(msgs, "\n\t"))
		}
	})
}
