//go:build cgo && linux

package nvmlsource_test

import (
	"os"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
)

// fakeSet is a process set a test changes between listings.
type fakeSet struct {
	mu    sync.Mutex
	pids  []int
	calls int
}

func (f *fakeSet) set(pids ...int) {
	f.mu.Lock()
	f.pids = pids
	f.mu.Unlock()
}

func (f *fakeSet) AppendPIDs(dst []int) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return append(dst, f.pids...)
}

func (f *fakeSet) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// TestProcessSetFollowsTheBackend steps a server's process set through a
// runner that starts, exits and starts again, as Ollama's does, beside a
// process of another tenant on the same board: each listing attributes
// the set as it stands then, from the first listing that sees a process,
// and a pid that left the set is not attributed, even while NVML lists a
// process under it (a reused pid).
func TestProcessSetFollowsTheBackend(t *testing.T) {
	const (
		server = 100  // ollama serve: in the set throughout
		runner = 200  // its first runner; later a stranger's reused pid
		again  = 201  // the runner started again after an idle unload
		tenant = 9000 // another tenant's process on the board
	)
	srv, fake := fakeH100(t, steady)
	set := &fakeSet{pids: []int{server}}
	steps := []struct {
		name   string
		set    []int
		listed []uint32
		util   []nvml.ProcessUtilizationSample
		want   source.Share
	}{
		{
			name:   "the server and another tenant",
			set:    []int{server},
			listed: []uint32{server, tenant},
			util:   []nvml.ProcessUtilizationSample{sample(server, 10, 30), sample(tenant, 10, 70)},
			want:   source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.3},
		},
		{
			name:   "the runner started: attributed from the first listing that sees it",
			set:    []int{server, runner},
			listed: []uint32{server, runner, tenant},
			util:   []nvml.ProcessUtilizationSample{sample(runner, 20, 50), sample(tenant, 20, 50)},
			want:   source.Share{Processes: 3, Shared: true, Split: true, Fraction: 0.5},
		},
		{
			name:   "the runner exited and started again under a new pid",
			set:    []int{server, again},
			listed: []uint32{again, tenant},
			util:   []nvml.ProcessUtilizationSample{sample(again, 30, 20), sample(tenant, 30, 80)},
			want:   source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.2},
		},
		{
			name:   "the old runner's pid, reused by a stranger, is not attributed",
			set:    []int{server, again},
			listed: []uint32{runner, again, tenant},
			util:   []nvml.ProcessUtilizationSample{sample(runner, 40, 40), sample(again, 40, 10), sample(tenant, 40, 50)},
			want:   source.Share{Processes: 3, Shared: true, Split: true, Fraction: 0.1},
		},
		{
			name:   "the backend is gone: the board is charged whole and flagged",
			set:    nil,
			listed: []uint32{tenant},
			util:   []nvml.ProcessUtilizationSample{sample(tenant, 50, 90)},
			want:   source.Share{Processes: 1, Shared: true},
		},
		{
			name:   "only the set's processes: exclusive",
			set:    []int{server, again},
			listed: []uint32{server, again},
			util:   []nvml.ProcessUtilizationSample{sample(again, 60, 90)},
			want:   source.Share{Processes: 2, Split: true, Fraction: 1},
		},
	}
	s := newSource(t, srv, nvmlsource.WithProcessSet(set))
	if got := set.callCount(); got != 1 {
		t.Fatalf("New called the set %d times, want once (its first listing)", got)
	}
	for k, st := range steps {
		set.set(st.set...)
		procs(fake[3], st.listed...)
		smUtil(fake[3], st.util)
		nvmlsource.RefreshShares(s)
		if got := s.Share(3); got != st.want {
			t.Errorf("step %d, %s: Share(3) = %+v, want %+v", k, st.name, got, st.want)
		}
		// Share reads the latest listing: it never calls the set.
		for range 10 {
			s.Share(3)
		}
		if got, want := set.callCount(), k+2; got != want {
			t.Errorf("step %d: the set was called %d times, want %d: once per listing", k, got, want)
		}
	}
}

// TestProcessSetAddsToNamed: the pids of WithProcesses stay attributed
// beside the set's, and a set that names nothing does not fall back to
// this process.
func TestProcessSetAddsToNamed(t *testing.T) {
	srv, fake := fakeH100(t, steady)
	set := &fakeSet{}
	procs(fake[3], 300, 400, uint32(other))
	smUtil(fake[3], []nvml.ProcessUtilizationSample{sample(300, 10, 10), sample(400, 10, 30), sample(other, 10, 60)})
	s := newSource(t, srv, nvmlsource.WithProcesses(300), nvmlsource.WithProcessSet(set))
	if got, want := s.Share(3), (source.Share{Processes: 3, Shared: true, Split: true, Fraction: 0.1}); got != want {
		t.Errorf("the named pid alone: Share(3) = %+v, want %+v", got, want)
	}
	set.set(400)
	smUtil(fake[3], []nvml.ProcessUtilizationSample{sample(300, 20, 10), sample(400, 20, 30), sample(other, 20, 60)})
	nvmlsource.RefreshShares(s)
	if got, want := s.Share(3), (source.Share{Processes: 3, Shared: true, Split: true, Fraction: 0.4}); got != want {
		t.Errorf("named and set: Share(3) = %+v, want %+v", got, want)
	}

	// A set alone, empty: nothing is attributed, not even this process.
	srv2, fake2 := fakeH100(t, steady)
	procs(fake2[3], uint32(os.Getpid()))
	s2 := newSource(t, srv2, nvmlsource.WithProcessSet(&fakeSet{}))
	if got, want := s2.Share(3), (source.Share{Processes: 1, Shared: true}); got != want {
		t.Errorf("an empty set, this process on the board: Share(3) = %+v, want %+v (not attributed)", got, want)
	}
}

// BenchmarkRefreshProcessSet is BenchmarkRefresh with the attributed
// processes read from a set at each listing: the set's pids land in
// buffers the source keeps, so that the listing allocates what
// BenchmarkRefresh's does and no more (the set's own work aside, here
// none).
func BenchmarkRefreshProcessSet(b *testing.B) {
	benchRefresh(b, nvmlsource.WithProcessSet(&fakeSet{pids: []int{os.Getpid(), 4243, 4244}}))
}
