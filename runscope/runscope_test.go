package runscope_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/runscope"
)

func TestSnapshotSub(t *testing.T) {
	tests := []struct {
		name      string
		cur, base runscope.Snapshot
		want      runscope.Snapshot
	}{
		{
			name: "field by field",
			cur:  runscope.Snapshot{T: 9, EnergyMJ: []uint64{100, 50}, OutputTokens: 10, InputTokens: 4, UnattributedMJ: 7},
			base: runscope.Snapshot{T: 1, EnergyMJ: []uint64{40, 50}, OutputTokens: 3, InputTokens: 4, UnattributedMJ: 2},
			want: runscope.Snapshot{T: 9, EnergyMJ: []uint64{60, 0}, OutputTokens: 7, InputTokens: 0, UnattributedMJ: 5},
		},
		{
			name: "saturates at zero",
			cur:  runscope.Snapshot{EnergyMJ: []uint64{1}, OutputTokens: 1},
			base: runscope.Snapshot{EnergyMJ: []uint64{5}, OutputTokens: 9},
			want: runscope.Snapshot{EnergyMJ: []uint64{0}},
		},
		{
			name: "a device missing from the baseline counts from zero",
			cur:  runscope.Snapshot{EnergyMJ: []uint64{10, 20}},
			base: runscope.Snapshot{EnergyMJ: []uint64{3}},
			want: runscope.Snapshot{EnergyMJ: []uint64{7, 20}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cur.Sub(tt.base)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("Sub = %+v, want %+v", got, tt.want)
			}
			if got.TotalEnergyMJ() != tt.want.TotalEnergyMJ() {
				t.Fatalf("TotalEnergyMJ = %d", got.TotalEnergyMJ())
			}
		})
	}
}

func TestScopeBeginEndsThePreviousRun(t *testing.T) {
	var s runscope.Scope
	if s.Current() != nil {
		t.Fatal("zero Scope has a current run")
	}
	t0 := time.Unix(100, 0)
	a, prev := s.Begin("model-a", t0, runscope.Snapshot{EnergyMJ: []uint64{1000}, OutputTokens: 10})
	if prev != nil || s.Current() != a || a.Model() != "model-a" || !a.Start().Equal(t0) {
		t.Fatalf("first Begin: run %+v, prev %v", a, prev)
	}
	if _, ended := a.End(); ended {
		t.Fatal("current run reports an end")
	}
	swap := runscope.Snapshot{EnergyMJ: []uint64{1500}, OutputTokens: 30}
	b, prev := s.Begin("model-b", t0.Add(time.Minute), swap)
	if prev != a || s.Current() != b || a.ID() == b.ID() {
		t.Fatalf("second Begin: prev %v current %v", prev, s.Current())
	}
	later := runscope.Snapshot{EnergyMJ: []uint64{1900}, OutputTokens: 45}
	// The ended run's view is frozen at the swap; the new one starts there.
	if got := a.Since(later); got.EnergyMJ[0] != 500 || got.OutputTokens != 20 {
		t.Fatalf("ended run's view %+v, want 500 mJ and 20 tokens", got)
	}
	if got := b.Since(later); got.EnergyMJ[0] != 400 || got.OutputTokens != 15 {
		t.Fatalf("new run's view %+v, want 400 mJ and 15 tokens", got)
	}
	if got := b.Since(swap); got.TotalEnergyMJ() != 0 || got.OutputTokens != 0 {
		t.Fatalf("new run at its own baseline: %+v, want zero", got)
	}
}

func TestRunResourceMergesWithoutSchemaConflict(t *testing.T) {
	r := runscope.NewRun("llama", time.Now(), runscope.Snapshot{})
	app := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("svc"))
	merged, err := resource.Merge(app, r.Resource())
	if err != nil {
		t.Fatal(err)
	}
	want := map[attribute.Key]string{runscope.RunIDKey: r.ID(), runscope.ModelKey: "llama", semconv.ServiceNameKey: "svc"}
	for k, v := range want {
		if got, ok := merged.Set().Value(k); !ok || got.AsString() != v {
			t.Fatalf("merged resource %v lacks %s=%s", merged, k, v)
		}
	}
	if r.Resource().SchemaURL() != "" {
		t.Fatal("run resource has a schema URL")
	}
}

func TestNewIDUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := runscope.NewID()
		if len(id) != 32 || seen[id] {
			t.Fatalf("id %q repeated or malformed", id)
		}
		seen[id] = true
	}
}

func TestScopeConcurrentSafe(t *testing.T) {
	var s runscope.Scope
	s.Begin("m", time.Now(), runscope.Snapshot{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				if g%2 == 0 {
					s.Begin("m", time.Now(), runscope.Snapshot{OutputTokens: uint64(i)})
					continue
				}
				r := s.Current()
				if r == nil || r.ID() == "" {
					t.Error("no current run")
					return
				}
				r.Since(runscope.Snapshot{OutputTokens: 1000})
			}
		}()
	}
	wg.Wait()
}

func ExampleScope() {
	var s runscope.Scope
	run, _ := s.Begin("model-a", time.Now(), runscope.Snapshot{EnergyMJ: []uint64{50_000}, OutputTokens: 100})
	// Later, the process-cumulative totals have climbed:
	now := runscope.Snapshot{EnergyMJ: []uint64{80_000}, OutputTokens: 160}
	view := run.Since(now)
	fmt.Println(view.TotalEnergyMJ(), "mJ,", view.OutputTokens, "tokens this run")
	// Output: 30000 mJ, 60 tokens this run
}
