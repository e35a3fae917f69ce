package otelenergy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelenergy/otelenergy/simgpu"
)

func withTenant(t testing.TB, ctx context.Context, kv ...string) context.Context {
	var ms []baggage.Member
	for i := 0; i < len(kv); i += 2 {
		m, err := baggage.NewMember(kv[i], kv[i+1])
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	b, err := baggage.New(ms...)
	if err != nil {
		t.Fatal(err)
	}
	return baggage.ContextWithBaggage(ctx, b)
}

// TestBaggageAttributes sends requests with tenant baggage through otelhttp
// and the middleware, with a cap of two tenants: the span carries the
// tenant, the histogram is split by tenant with the third under _other,
// and the sums by tenant add up to the histogram's total and to the
// requests' final figures.
func TestBaggageAttributes(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	sr, tp := newTracing()
	rig := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp), WithBaggageAttributes(2, "tenant"))
	rig.m.Sample()
	var mu sync.Mutex
	final := map[string]*requestState{}
	h := otelhttp.NewHandler(NewMiddleware(rig.m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.m.AddTokens(r.Context(), 10)
		mu.Lock()
		final[r.URL.Path] = requestFrom(r.Context()).st
		mu.Unlock()
		rig.tick(step) // the request spans a counter step
	})), "op", otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagation.Baggage{}))
	tenants := []string{"acme", "globex", "initech", "acme", ""}
	for i, tenant := range tenants {
		req := httptest.NewRequest(http.MethodGet, "/r"+string(rune('a'+i)), nil)
		if tenant != "" {
			req.Header.Set("baggage", "tenant="+tenant+",other=x")
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	rig.settle(t)

	want := map[string]string{"/ra": "acme", "/rb": "globex", "/rc": BaggageOverflowValue, "/rd": "acme", "/re": ""}
	spans := sr.Ended()
	if len(spans) != len(tenants) {
		t.Fatalf("%d spans", len(spans))
	}
	for i, s := range spans {
		if got, w := spanAttrs(s)["tenant"].AsString(), want["/r"+string(rune('a'+i))]; got != w {
			t.Errorf("span %d tenant %q, want %q", i, got, w)
		}
		if _, ok := spanAttrs(s)["other"]; ok {
			t.Errorf("span %d carries a baggage key it was not asked for", i)
		}
	}

	m, ok := findMetric(collect(t, rd), "otelenergy.request.energy")
	if !ok {
		t.Fatal("no request-energy histogram")
	}
	byTenant := map[string]float64{}
	counts := map[string]uint64{}
	for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		v, _ := dp.Attributes.Value("tenant")
		byTenant[v.AsString()] += dp.Sum
		counts[v.AsString()] += dp.Count
	}
	wantMJ := map[string]uint64{}
	for path, st := range final {
		wantMJ[want[path]] += st.EnergyMJ()
	}
	if len(byTenant) != 4 || counts["acme"] != 2 || counts[BaggageOverflowValue] != 1 || counts[""] != 1 {
		t.Fatalf("histogram by tenant: counts %v; want acme 2, globex 1, _other 1, none 1", counts)
	}
	for tenant, j := range byTenant {
		if w := float64(wantMJ[tenant]) / 1000; j != w || w == 0 {
			t.Errorf("tenant %q: histogram %v J, final figures %v J", tenant, j, w)
		}
	}
}

func TestBaggageAttributesInvalid(t *testing.T) {
	gpu, _ := simgpu.New(simgpu.Config{})
	keys := make([]string, MaxBaggageKeys+1)
	for i := range keys {
		keys[i] = string(rune('a' + i))
	}
	for _, k := range [][]string{keys, {"tenant", ""}} {
		if _, err := NewMonitor(gpu, WithBaggageAttributes(1, k...)); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("keys %q: %v, want ErrInvalidConfig", k, err)
		}
	}
}

// TestBaggageAttributesAllocs checks that a request with baggage costs
// no allocation beyond one without, once its values were seen.
func TestBaggageAttributesAllocs(t *testing.T) {
	rig := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(sdkmetric.NewMeterProvider()), WithBaggageAttributes(0, "tenant", "team"))
	rig.m.Sample()
	plain := context.Background()
	tagged := withTenant(t, plain, "tenant", "acme", "team", "infra")
	run := func(ctx context.Context) float64 {
		return testing.AllocsPerRun(200, func() { rig.m.StartRequest(ctx).End() })
	}
	run(tagged)
	if a, b := run(plain), run(tagged); b > a {
		t.Fatalf("a request allocates %v times with baggage, %v without", b, a)
	}
}

// TestBaggageAttributesConcurrentSafe admits values from many goroutines:
// exactly the cap is admitted, whatever the interleaving.
func TestBaggageAttributesConcurrentSafe(t *testing.T) {
	rig := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(sdkmetric.NewMeterProvider()), WithBaggageAttributes(5, "tenant"))
	rig.m.Sample()
	var wg sync.WaitGroup
	got := make([][]string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				ctx := withTenant(t, context.Background(), "tenant", "t"+string(rune('a'+(i+g)%20)))
				r := rig.m.StartRequest(ctx)
				got[g] = append(got[g], r.st.attrs.span[0].Value.AsString())
				r.End()
			}
		}()
	}
	wg.Wait()
	kept := map[string]bool{}
	for _, vs := range got {
		for _, v := range vs {
			kept[v] = true
		}
	}
	if len(kept) != 6 || !kept[BaggageOverflowValue] {
		t.Fatalf("values kept %v: want 5 tenants and %s", kept, BaggageOverflowValue)
	}
}

// TestBaggageCombinationsCapped sends 3 keys of 30, 30 and 10 values,
// 9,000 combinations: the first 1,000 keep their values, every later one
// shares the all-_other set, so at most 1,001 attribute sets exist.
func TestBaggageCombinationsCapped(t *testing.T) {
	rig := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(sdkmetric.NewMeterProvider()), WithBaggageAttributes(30, "tenant", "team", "app"))
	rig.m.Sample()
	sets := map[*requestAttrs]bool{}
	n := 0
	for a := range 30 {
		for b := range 30 {
			for c := range 10 {
				ctx := withTenant(t, context.Background(), "tenant", fmt.Sprint("t", a), "team", fmt.Sprint("m", b), "app", fmt.Sprint("a", c))
				r := rig.m.StartRequest(ctx)
				sets[r.st.attrs] = true
				if n >= maxBaggageCombinations {
					for _, kv := range r.st.attrs.span {
						if kv.Value.AsString() != BaggageOverflowValue {
							t.Fatalf("combination %d: %v, want every key %s", n, r.st.attrs.span, BaggageOverflowValue)
						}
					}
				}
				r.End()
				n++
			}
		}
	}
	if len(sets) != maxBaggageCombinations+1 {
		t.Fatalf("%d attribute sets for %d combinations, want %d", len(sets), n, maxBaggageCombinations+1)
	}
}

// TestRequestModelsCapped records requests naming 150 models: the first
// maxRequestModels keep their names on otelenergy.request.energy, later
// ones share the _other set, and the request's model replaces the run's.
func TestRequestModelsCapped(t *testing.T) {
	rig := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(sdkmetric.NewMeterProvider()), WithModel("run-model"))
	run := rig.m.run.Load()
	var c modelAttrs
	sets := map[metric.RecordOption]bool{}
	for i := range 150 {
		sets[c.recordOpt(run, nil, fmt.Sprint("model-", i))] = true
	}
	if len(sets) != maxRequestModels+1 {
		t.Fatalf("%d sets for 150 models, want %d", len(sets), maxRequestModels+1)
	}
	if c.recordOpt(run, nil, "model-7") != c.recordOpt(run, nil, "model-7") {
		t.Fatal("a model's set was built twice")
	}
	attrs := metric.NewRecordConfig([]metric.RecordOption{c.recordOpt(run, nil, "model-3")}).Attributes()
	if v, _ := attrs.Value("gen_ai.request.model"); v.AsString() != "model-3" {
		t.Fatalf("attributes %v: want the request's model over the run's", attrs.ToSlice())
	}
	attrs = metric.NewRecordConfig([]metric.RecordOption{c.recordOpt(run, nil, "model-149")}).Attributes()
	if v, _ := attrs.Value("gen_ai.request.model"); v.AsString() != BaggageOverflowValue {
		t.Fatalf("attributes %v: want %s past the cap", attrs.ToSlice(), BaggageOverflowValue)
	}
}
