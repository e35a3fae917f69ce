package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/hostshare"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procfs"
	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/cputime"
	"github.com/otelenergy/otelenergy/internal/fakesysfs"
)

// TestHostSeriesKeepProcessIdentity: a GPU process in a container (its
// container.id sorts before hw.id) has, on every RAPL domain, a series of
// its own with the domain's hw.id and all of its identity: pid, name,
// creation time, container. The attribute set the board's series is
// built from must not be the slice the host's identity shares.
func TestHostSeriesKeepProcessIdentity(t *testing.T) {
	sys, proc := t.TempDir(), t.TempDir()
	if err := fakesysfs.Write(sys, filepath.FromSlash("../../../../internal/rapl/testdata/twosocket.tree")); err != nil {
		t.Fatal(err)
	}
	src, _, err := energysource.Host(energysource.WithSysfs(sys))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fs := procfs.FS{Root: proc}
	var clock int64
	host, err := hostshare.New(hostshare.Config{Domains: src, CPU: &cputime.Trees{Root: proc}, Now: func() int64 { clock += 1e9; return clock }})
	if err != nil {
		t.Fatal(err)
	}
	const cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	writeProc(t, proc, 1000, 1000, map[uint32]uint64{10: 0})
	if err := os.WriteFile(filepath.Join(proc, "10", "cgroup"), []byte("0::/system.slice/docker-"+cid+".scope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rings := newFakeRings(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ag, err := agent.New(agent.Config{Rings: rings, Lister: fixedList{10}, Resolver: fs, IdleWatts: 50, MeterProvider: mp, SampleHold: -1, Host: host})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	ag.Pass()
	writeProc(t, proc, 1200, 1200, map[uint32]uint64{10: 100})
	for _, z := range []string{"intel-rapl:0", "intel-rapl:1"} {
		if err := fakesysfs.Set(sys, "class/powercap/"+z+"/energy_uj", strconv.Itoa(1000000123+2000000)); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		rings.push(10_000)
	}
	ag.Pass()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			s, ok := m.Data.(metricdata.Sum[float64])
			if !ok || m.Name != "otelenergy.process.energy" {
				continue
			}
			for _, dp := range s.DataPoints {
				if _, ok := dp.Attributes.Value(semconv.ProcessPIDKey); !ok {
					if _, ok := dp.Attributes.Value(semconv.ContainerIDKey); ok {
						t.Errorf("a series with a container and no pid: %v", dp.Attributes.ToSlice())
					}
					continue // exited series
				}
				id, _ := dp.Attributes.Value(semconv.HwIDKey)
				seen[id.AsString()] = true
				c, _ := dp.Attributes.Value(semconv.ContainerIDKey)
				name, _ := dp.Attributes.Value(semconv.ProcessExecutableNameKey)
				_, created := dp.Attributes.Value(semconv.ProcessCreationTimeKey)
				if c.AsString() != cid || name.AsString() != "vllm" || !created {
					t.Errorf("%s: %v", id.AsString(), dp.Attributes.ToSlice())
				}
			}
		}
	}
	for _, id := range []string{"GPU-0", "intel-rapl:0", "intel-rapl:1"} {
		if !seen[id] {
			t.Errorf("no series of process 10 with hw.id %s; seen %v", id, strings.Join(keys(seen), ", "))
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
