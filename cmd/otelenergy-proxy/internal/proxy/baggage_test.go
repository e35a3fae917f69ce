package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestBaggageTenant sends completions with W3C baggage through the proxy
// with -baggage-keys tenant and a cap of one value: the spans carry the
// tenant, the second tenant is recorded as _other, and the exported
// request-energy histogram is split the same way, each point with the
// model the requests named.
func TestBaggageTenant(t *testing.T) {
	col := newCollector(t)
	b := httptest.NewServer(&backend{tokens: 8, pace: 15 * time.Millisecond})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-horizon", "1s", "-baggage-keys", "tenant", "-baggage-values", "1"}, nil)
	for _, tenant := range []string{"acme", "globex", "acme"} {
		req, _ := http.NewRequest(http.MethodPost, r.api+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
		req.Header.Set("baggage", "tenant="+tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	got := map[string]int{}
	for _, s := range col.serverSpans() {
		v, _ := attr(s.Attributes, "tenant")
		got[v.GetStringValue()]++
	}
	if got["acme"] != 2 || got["_other"] != 1 || len(got) != 2 {
		t.Fatalf("spans by tenant %v, want acme 2 and _other 1", got)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	hist := map[string]uint64{}
	for _, m := range col.metrics {
		if m.Name != "otelenergy.request.energy" {
			continue
		}
		for _, dp := range m.GetHistogram().DataPoints {
			v, _ := attr(dp.Attributes, "tenant")
			hist[v.GetStringValue()] += dp.Count
			if model, _ := attr(dp.Attributes, "gen_ai.request.model"); model.GetStringValue() != "m" {
				t.Fatalf("a request-energy point has gen_ai.request.model %q, want the requests' m: %v", model.GetStringValue(), dp.Attributes)
			}
		}
	}
	if hist["acme"] != 2 || hist["_other"] != 1 {
		t.Fatalf("request-energy histogram counts by tenant %v, want acme 2 and _other 1", hist)
	}
}
