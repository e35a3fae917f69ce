package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
)

// TestCarbonFlagExitsTwo: a bad carbon value exits 2 with one line that
// names the flag, before anything starts.
func TestCarbonFlagExitsTwo(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-carbon-intensity", "436g"}, "-carbon-intensity"},
		{[]string{"-carbon-intensity", "436", "-pue", "0.9"}, "-pue"},
		{[]string{"-carbon-provider", "ukgrid", "-carbon-zone", "FR"}, "-carbon-zone"},
	} {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"-simulate"}, c.args...), Env{Stdout: &out, Stderr: &errOut})
		if s := strings.TrimSpace(errOut.String()); code != exitUsage || strings.Contains(s, "\n") || !strings.Contains(s, c.want) {
			t.Errorf("%q: status %d, stderr %q; want 2 and one line naming %s", c.args, code, s, c.want)
		}
	}
}

// TestCarbonStaticLogged: -carbon-intensity with -pue turns carbon on
// and says so in one line at start; requests are served as before.
func TestCarbonStaticLogged(t *testing.T) {
	r := start(t, []string{"-simulate", "-backend", newTestBackend(t), "-carbon-intensity", "436", "-pue", "1.135"}, nil)
	resp, _ := post(t, context.Background(), http.DefaultClient, r.api, true)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var line string
	for _, l := range strings.Split(r.stderr.String(), "\n") {
		if strings.Contains(l, "carbon on") {
			if line != "" {
				t.Fatalf("two carbon lines:\n%s", r.stderr)
			}
			line = l
		}
	}
	for _, want := range []string{"source=static", "kind=average", "g_per_kwh=436", "pue=1.135", "embodied_g_per_hour=0"} {
		if !strings.Contains(line, want) {
			t.Errorf("carbon line %q lacks %s", line, want)
		}
	}
}

// TestCarbonPollerStopsAfterMonitor starts the proxy with a provider (a
// fake GB Carbon Intensity API on 127.0.0.1): the Monitor gets the model,
// the poller answers, and the lifecycle stops the poller after the
// Monitor, so that the Monitor's last intervals keep their reading.
func TestCarbonPollerStopsAfterMonitor(t *testing.T) {
	var asked atomic.Int64
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		from := time.Now().UTC().Truncate(30 * time.Minute)
		fmt.Fprintf(w, `{"data":[{"from":"%s","to":"%s","intensity":{"forecast":180,"actual":175,"index":"moderate"}}]}`,
			from.Format("2006-01-02T15:04Z"), from.Add(30*time.Minute).Format("2006-01-02T15:04Z"))
	}))
	t.Cleanup(fake.Close)
	carbonClient = []carbon.ClientOption{carbon.WithBaseURL(fake.URL)}
	t.Cleanup(func() { carbonClient = nil })

	cfg, err := flags.Parse([]string{"-simulate", "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-backend", newTestBackend(t),
		"-carbon-provider", "ukgrid", "-carbon-zone", "GB", "-carbon-intensity", "200", "-horizon", "1s"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	p := newRunner(cfg, slog.New(slog.NewTextHandler(&logs, nil)), Env{Stdout: io.Discard, Stderr: &logs, Signals: make(chan os.Signal, 1),
		LookupEnv: func(string) (string, bool) { return "", false }, ProcRoot: "/proc", After: time.After})
	defer p.errLog.Close()
	if err := p.start(); err != nil {
		p.shutdown(false)
		t.Fatal(err)
	}
	var names []string
	for _, s := range p.lc.services {
		names = append(names, s.name)
	}
	pi, mi := slices.Index(names, "carbon poller"), slices.Index(names, "energy monitor")
	if pi < 0 || mi < pi {
		p.shutdown(false)
		t.Fatalf("services %q: the poller must start before the Monitor, to stop after it", names)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r := p.carbon.Model.Current(); r != nil && !r.Fallback {
			if r.MgPerKWh != 175_000 || r.Source != carbon.SourceUKGrid {
				t.Errorf("reading %+v, want the actual 175 g/kWh", r)
			}
			break
		}
		if time.Now().After(deadline) {
			p.shutdown(false)
			t.Fatalf("the fake provider was asked %d times, no reading", asked.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.shutdown(false)
	if !strings.Contains(logs.String(), "source=ukgrid") || !strings.Contains(logs.String(), "zone=GB") || !strings.Contains(logs.String(), `fallback="200 g/kWh"`) {
		t.Errorf("no carbon line with its source, zone and fallback:\n%s", logs.String())
	}
}
