package otelenergy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/otelenergy/otelenergy/simgpu"
)

// TestAddCachedInputTokens checks the contract of AddCachedInputTokens:
// the cached tokens are a part of the input tokens, so they reach the
// span as gen_ai.usage.cache_read.input_tokens, capped at the input
// tokens, and move no total; a bad count is rejected and counted like
// the other reports'.
func TestAddCachedInputTokens(t *testing.T) {
	for _, tc := range []struct {
		name          string
		in, cached    []int
		wantCached    int64 // 0: no attribute
		wantRejected  uint64
		wantInputAttr int64
	}{
		{name: "part of the prompt", in: []int{100}, cached: []int{60}, wantCached: 60, wantInputAttr: 100},
		{name: "reported in parts", in: []int{40, 60}, cached: []int{10, 20}, wantCached: 30, wantInputAttr: 100},
		{name: "more than the prompt is capped", in: []int{50}, cached: []int{80}, wantCached: 50, wantInputAttr: 50},
		{name: "before the prompt", in: nil, cached: []int{20}, wantCached: 0},
		{name: "negative and absurd counts", in: []int{10}, cached: []int{-1, 1 << 25}, wantCached: 0, wantRejected: 2, wantInputAttr: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sr, tp := newTracing()
			rig := newRig(t, ideal(simgpu.Config{}))
			rig.m.Sample()
			h := otelhttp.NewHandler(NewMiddleware(rig.m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, n := range tc.in {
					rig.m.AddInputTokens(r.Context(), n)
				}
				for _, n := range tc.cached {
					rig.m.AddCachedInputTokens(r.Context(), n)
				}
				rig.m.AddTokens(r.Context(), 1)
			})), "op", otelhttp.WithTracerProvider(tp))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
			a := spanAttrs(sr.Ended()[0])
			got, ok := a[cachedInputTokensKey]
			switch {
			case tc.wantCached == 0 && ok:
				t.Errorf("%s = %v, want no attribute", cachedInputTokensKey, got)
			case tc.wantCached != 0 && (!ok || got.AsInt64() != tc.wantCached):
				t.Errorf("%s = %v (set %v), want %d", cachedInputTokensKey, got, ok, tc.wantCached)
			}
			if tc.wantInputAttr != 0 && a[inputTokensKey].AsInt64() != tc.wantInputAttr {
				t.Errorf("%s = %v, want %d", inputTokensKey, a[inputTokensKey], tc.wantInputAttr)
			}
			rig.m.Sample()
			var in uint64
			for _, n := range tc.in {
				in += uint64(n)
			}
			if tot := rig.m.Totals(); tot.InputTokens != in || tot.OutputTokens != 1 {
				t.Errorf("totals %d in, %d out; want %d and 1: cached tokens must not add to them", tot.InputTokens, tot.OutputTokens, in)
			}
			if r := rig.m.Stats().RejectedTokenReports; r != tc.wantRejected {
				t.Errorf("RejectedTokenReports = %d, want %d", r, tc.wantRejected)
			}
		})
	}
}
