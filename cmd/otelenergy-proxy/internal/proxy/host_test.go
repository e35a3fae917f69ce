package proxy

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/fakesysfs"
)

// TestServeHostShare: -sources rapl meters the host's RAPL domains (a fake
// two-socket tree whose counters climb while the test runs) and gives each
// request its share by the backend's CPU time: the exported span carries
// energy.cpu.millijoules and energy.memory.millijoules beside its GPU
// energy. Without the backend's pids the start fails, saying so.
func TestServeHostShare(t *testing.T) {
	root := t.TempDir()
	if err := fakesysfs.Write(root, filepath.FromSlash("../../../../internal/rapl/testdata/twosocket.tree")); err != nil {
		t.Fatal(err)
	}
	hostOptions = []energysource.Option{energysource.WithSysfs(root)}
	t.Cleanup(func() { hostOptions = nil })

	var out, errOut bytes.Buffer
	code := Main([]string{"-simulate", "-sources", "rapl", "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-backend", "http://127.0.0.1:1"},
		Env{Stdout: &out, Stderr: &errOut, Signals: make(chan os.Signal, 1), LookupEnv: func(string) (string, bool) { return "", false }})
	if code == 0 || !strings.Contains(errOut.String(), errHostNeedsBackend.Error()) {
		t.Fatalf("-sources rapl without the backend's pids: status %d, %q; want a failed start naming the missing pids", code, errOut.String())
	}

	// The counters climb: 40 W on each package, 4 W on its DRAM.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		pk, dr := uint64(1_000_000_123), uint64(200_000_000)
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			pk, dr = pk+400_000, dr+40_000
			for _, f := range []error{
				fakesysfs.Set(root, "class/powercap/intel-rapl:0/energy_uj", strconv.FormatUint(pk, 10)),
				fakesysfs.Set(root, "class/powercap/intel-rapl:0:1/energy_uj", strconv.FormatUint(dr, 10)),
			} {
				if f != nil {
					t.Error(f)
					return
				}
			}
		}
	}()
	defer func() { close(stop); <-done }()

	col := newCollector(t)
	b := httptest.NewServer(&backend{tokens: 30, pace: 20 * time.Millisecond})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-sources", "rapl", "-backend-pid", strconv.Itoa(os.Getpid()), "-backend", b.URL, "-horizon", "1s"}, nil)
	waitReady(t, r.admin)
	// Busy work in the backend's process (this one), so that its CPU
	// time grows in the host windows the request covers.
	busy := make(chan struct{})
	go func() {
		x := 0
		for {
			select {
			case <-busy:
				return
			default:
			}
			for i := range 1 << 16 {
				x ^= i
			}
		}
	}()
	resp, body := post(t, context.Background(), &http.Client{}, r.api, true)
	close(busy)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if c := r.stop(t); c != 0 {
		t.Fatalf("exit status %d after SIGTERM:\n%s", c, r.stderr)
	}
	spans := col.serverSpans()
	if len(spans) != 1 {
		t.Fatalf("%d server spans exported, want 1", len(spans))
	}
	for _, k := range []string{"energy.millijoules", "energy.cpu.millijoules", "energy.memory.millijoules"} {
		v, ok := attr(spans[0].Attributes, k)
		if !ok || v.GetIntValue() <= 0 {
			t.Errorf("span attribute %s = %v, want > 0 mJ", k, v)
		}
	}
	if !strings.Contains(r.stderr.String(), "rapl") {
		t.Errorf("no log line about the rapl source:\n%s", r.stderr)
	}
}
