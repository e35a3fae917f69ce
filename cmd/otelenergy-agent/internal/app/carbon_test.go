package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/app"
)

// TestRunCarbon runs the agent with a provider (a fake GB Carbon
// Intensity API on 127.0.0.1) and a fallback: it logs one line saying
// what carbon does, the final export carries per-process emissions, the
// intensity and its age, and the poller stops after the agent's final
// pass.
func TestRunCarbon(t *testing.T) {
	asked := make(chan struct{}, 100)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { asked <- struct{}{} }()
		from := time.Now().UTC().Truncate(30 * time.Minute)
		fmt.Fprintf(w, `{"data":[{"from":"%s","to":"%s","intensity":{"forecast":180,"actual":175,"index":"moderate"}}]}`,
			from.Format("2006-01-02T15:04Z"), from.Add(30*time.Minute).Format("2006-01-02T15:04Z"))
	}))
	defer fake.Close()
	cfg, err := flags.Parse([]string{"-simulate", "-simulate-devices", "2", "-admin-listen", "127.0.0.1:0",
		"-carbon-provider", "ukgrid", "-carbon-zone", "GB", "-carbon-intensity", "200", "-pue", "1.1"},
		func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness()
	d := h.deps(nil)
	d.CarbonClient = []carbon.ClientOption{carbon.WithBaseURL(fake.URL)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cfg, h.logger, d) }()
	<-asked // the poller's first fetch, at its start
	for range 3 {
		h.ticks <- time.Now()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if i, j := slices.Index(h.stops, "carbon"), slices.Index(h.stops, "agent"); i < 0 || i < j {
		t.Fatalf("stopped %q: the poller must stop after the agent", h.stops)
	}
	got := h.exp.metrics()
	for _, m := range []string{"otelenergy.process.co2e", "otelenergy.co2e.unattributed", "otelenergy.carbon.intensity", "otelenergy.carbon.intensity.age"} {
		if !slices.Contains(got, m) {
			t.Errorf("the final export lacks %s: %q", m, got)
		}
	}
	l := h.log.String()
	if strings.Count(l, "carbon on") != 1 || !strings.Contains(l, "source=ukgrid") || !strings.Contains(l, "pue=1.1") || !strings.Contains(l, `fallback="200 g/kWh"`) {
		t.Errorf("want one carbon line with its source, PUE and fallback:\n%s", l)
	}
}
