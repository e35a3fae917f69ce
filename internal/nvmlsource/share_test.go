//go:build cgo && linux

package nvmlsource_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
)

// other is the pid of a process that is not this one.
const other = 4242

// procs makes d list pids as its compute processes.
func procs(d *server.Device, pids ...uint32) {
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		infos := make([]nvml.ProcessInfo, len(pids))
		for i, p := range pids {
			infos[i] = nvml.ProcessInfo{Pid: p, UsedGpuMemory: 1 << 30}
		}
		return infos, nvml.SUCCESS
	}
}

// smUtil makes d answer GetProcessUtilization from a queue of replies, one
// per call; after the queue it answers NOT_FOUND. It records each
// lastSeenTimestamp passed.
func smUtil(d *server.Device, replies ...[]nvml.ProcessUtilizationSample) *[]uint64 {
	var (
		mu   sync.Mutex
		seen []uint64
	)
	d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, last)
		if len(replies) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		r := replies[0]
		replies = replies[1:]
		return r, nvml.SUCCESS
	}
	return &seen
}

func sample(pid uint32, ts uint64, sm uint32) nvml.ProcessUtilizationSample {
	return nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: ts, SmUtil: sm}
}

// procTree writes a fake /proc holding a stat file for each pid of
// parents, naming its parent as the kernel does (field 4), with a command
// name full of spaces and parentheses that a parser must not split on.
func procTree(t *testing.T, parents map[uint32]uint32) string {
	t.Helper()
	root := t.TempDir()
	for pid, ppid := range parents {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (vllm (worker) 1) 2) S %d %d %d 0 -1 4194560 0 0 0 0 5 1 0 0 20 0 9 0 %d 0\n", pid, ppid, pid, pid, 1000+pid)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestShare(t *testing.T) {
	me := uint32(os.Getpid())
	const (
		child      = other + 10 // a child of other
		grandchild = other + 11 // a child of child
		stranger   = other + 20 // a child of init
		orphan     = other + 21 // not in the tree: exited
	)
	tree := map[uint32]uint32{other: 1, child: other, grandchild: child, stranger: 1}
	// deep[k] is other's descendant k+1 generations down.
	var deep [9]uint32
	for k := range deep {
		deep[k] = other + 100 + uint32(k)
		tree[deep[k]] = other
		if k > 0 {
			tree[deep[k]] = deep[k-1]
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, d *server.Device)
		opts  []nvmlsource.Option
		want  source.Share
	}{
		{
			name: "no process",
			want: source.Share{Processes: 0, Split: true, Fraction: 1},
		},
		{
			name:  "only this process",
			setup: func(_ *testing.T, d *server.Device) { procs(d, me) },
			want:  source.Share{Processes: 1, Split: true, Fraction: 1},
		},
		{
			name: "another process at 70 SM% to our 30",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, me, other)
				smUtil(d, []nvml.ProcessUtilizationSample{
					sample(me, 10, 20), sample(other, 10, 50),
					sample(me, 20, 10), sample(other, 20, 20),
				})
			},
			want: source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.3},
		},
		{
			name: "samples not newer than the last are ignored",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, me, other)
				// The probe in New consumed nothing: lastSeen starts at 0,
				// so a sample at 0 is stale.
				smUtil(d, []nvml.ProcessUtilizationSample{sample(other, 0, 100), sample(me, 5, 30), sample(other, 5, 70)})
			},
			want: source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.3},
		},
		{
			name: "WithProcesses names the other process",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, me, other)
				smUtil(d, []nvml.ProcessUtilizationSample{sample(me, 10, 30), sample(other, 10, 70)})
			},
			opts: []nvmlsource.Option{nvmlsource.WithProcesses(other)},
			want: source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.7},
		},
		{
			name: "WithProcesses naming every listed process",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, me, other)
				smUtil(d, []nvml.ProcessUtilizationSample{sample(me, 10, 30), sample(other, 10, 70)})
			},
			opts: []nvmlsource.Option{nvmlsource.WithProcesses(int(me), other)},
			want: source.Share{Processes: 2, Split: true, Fraction: 1},
		},
		{
			name:  "idle shared board is split evenly",
			setup: func(_ *testing.T, d *server.Device) { procs(d, me, other, other+1, other+2) },
			want:  source.Share{Processes: 4, Shared: true, Split: true, Fraction: 0.25},
		},
		{
			// Not a confident zero: the attributed process may be missing
			// from the list for reasons the source cannot see (a wrong
			// pid, a pid namespace), so the board is charged unsplit and
			// flagged.
			name: "attributed process absent from a used board",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, other)
				smUtil(d, []nvml.ProcessUtilizationSample{sample(other, 10, 70)})
			},
			want: source.Share{Processes: 1, Shared: true},
		},
		{
			// Listed but idle while another process works: a measured
			// zero is no proof that none of the board's energy is ours
			// (a child doing our work, an MPS server holding it), so the
			// board is charged unsplit and flagged, never a confident 0.
			name: "attributed process listed, idle while another works",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, me, other)
				smUtil(d, []nvml.ProcessUtilizationSample{sample(me, 10, 0), sample(other, 10, 70)})
			},
			want: source.Share{Processes: 2, Shared: true},
		},
		{
			// MPS: the server and this client are listed, and the
			// utilization is reported against the server's pid.
			name: "MPS server listed with this process, utilization on the server",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, other)
				d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
					return []nvml.ProcessInfo{{Pid: me}}, nvml.SUCCESS
				}
				smUtil(d, []nvml.ProcessUtilizationSample{sample(other, 10, 90)})
			},
			want: source.Share{Processes: 2, Shared: true},
		},
		{
			name: "WithProcesses pid absent from a board with two others",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, me, other+1)
				smUtil(d, []nvml.ProcessUtilizationSample{sample(me, 10, 30), sample(other+1, 10, 70)})
			},
			opts: []nvmlsource.Option{nvmlsource.WithProcesses(other)},
			want: source.Share{Processes: 2, Shared: true},
		},
		{
			// The server named with WithProcesses does no GPU work of its
			// own: its children (tensor-parallel workers, a runner) do,
			// and their work is the server's.
			name: "descendants of the attributed process are attributed",
			setup: func(t *testing.T, d *server.Device) {
				procs(d, other, child, grandchild, stranger, orphan)
				smUtil(d, []nvml.ProcessUtilizationSample{sample(other, 10, 0), sample(child, 10, 30), sample(grandchild, 10, 30), sample(stranger, 10, 30), sample(orphan, 10, 10)})
			},
			opts: []nvmlsource.Option{nvmlsource.WithProcesses(other), nvmlsource.WithHostPIDs(true), nvmlsource.WithProcRoot(procTree(t, tree))},
			want: source.Share{Processes: 5, Shared: true, Split: true, Fraction: 0.6},
		},
		{
			name: "only the attributed process and its descendants",
			setup: func(t *testing.T, d *server.Device) {
				procs(d, other, child, grandchild)
				smUtil(d, []nvml.ProcessUtilizationSample{sample(child, 10, 50), sample(grandchild, 10, 40)})
			},
			opts: []nvmlsource.Option{nvmlsource.WithProcesses(other), nvmlsource.WithHostPIDs(true), nvmlsource.WithProcRoot(procTree(t, tree))},
			want: source.Share{Processes: 3, Split: true, Fraction: 1},
		},
		{
			// The walk stops after 8 parents, so that a listing reads few
			// files whatever the tree.
			name: "descendants 8 generations down are attributed, 9 are not",
			setup: func(t *testing.T, d *server.Device) {
				procs(d, deep[7], deep[8])
				smUtil(d, []nvml.ProcessUtilizationSample{sample(deep[7], 10, 25), sample(deep[8], 10, 75)})
			},
			opts: []nvmlsource.Option{nvmlsource.WithProcesses(other), nvmlsource.WithHostPIDs(true), nvmlsource.WithProcRoot(procTree(t, tree))},
			want: source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.25},
		},
		{
			// In a PID namespace of its own, /proc holds this container's
			// numbering, not NVML's: no ancestry is read.
			name: "descendants not read outside the host PID namespace",
			setup: func(t *testing.T, d *server.Device) {
				procs(d, other, child)
				smUtil(d, []nvml.ProcessUtilizationSample{sample(other, 10, 20), sample(child, 10, 80)})
			},
			opts: []nvmlsource.Option{nvmlsource.WithProcesses(other), nvmlsource.WithHostPIDs(false), nvmlsource.WithProcRoot(procTree(t, tree))},
			want: source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.2},
		},
		{
			name: "first listing fails",
			setup: func(_ *testing.T, d *server.Device) {
				d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }
			},
			want: source.Share{Processes: -1, Shared: true},
		},
		{
			name: "MIG mode unreadable",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, me)
				d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_UNKNOWN }
			},
			want: source.Share{Processes: -1, Shared: true},
		},
		{
			name: "MIG mode not supported is not MIG",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, me)
				d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
			},
			want: source.Share{Processes: 1, Split: true, Fraction: 1},
		},
		{
			name: "MIG board with another process",
			setup: func(t *testing.T, d *server.Device) {
				withMIG(t, d, 2)
				procs(d, me, other)
				d.GetProcessUtilizationFunc = nil // a call would panic
			},
			want: source.Share{Processes: 2, Shared: true},
		},
		{
			// The parent handle lists processes only to a privileged
			// caller: an empty list does not prove the board idle.
			name: "MIG board, empty listing",
			setup: func(t *testing.T, d *server.Device) {
				withMIG(t, d, 2)
				d.GetProcessUtilizationFunc = nil
			},
			want: source.Share{Processes: 0, Shared: true},
		},
		{
			name: "MIG board, listing fails",
			setup: func(t *testing.T, d *server.Device) {
				withMIG(t, d, 2)
				d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
				d.GetProcessUtilizationFunc = nil
			},
			want: source.Share{Processes: -1, Shared: true},
		},
		{
			name: "MIG board, only another process",
			setup: func(t *testing.T, d *server.Device) {
				withMIG(t, d, 2)
				procs(d, other)
				d.GetProcessUtilizationFunc = nil
			},
			want: source.Share{Processes: 1, Shared: true},
		},
		{
			name: "MIG board with only this process, every MIG device listed",
			setup: func(t *testing.T, d *server.Device) {
				(&migBoard{lists: [][]uint32{{me}, nil}}).install(t, d)
				procs(d, me)
				d.GetProcessUtilizationFunc = nil
			},
			want: source.Share{Processes: 1, Split: true, Fraction: 1},
		},
		{
			name: "utilization not supported",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, me, other)
				d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
					return nil, nvml.ERROR_NOT_SUPPORTED
				}
			},
			want: source.Share{Processes: 2, Shared: true},
		},
		{
			name: "MPS clients are listed apart",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, other) // the MPS server
				d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
					return []nvml.ProcessInfo{{Pid: me}, {Pid: other + 1}}, nvml.SUCCESS
				}
				smUtil(d, []nvml.ProcessUtilizationSample{sample(me, 10, 40), sample(other+1, 10, 40)})
			},
			want: source.Share{Processes: 3, Shared: true, Split: true, Fraction: 0.5},
		},
		{
			name:  "duplicate pids count once",
			setup: func(_ *testing.T, d *server.Device) { procs(d, me, me) },
			want:  source.Share{Processes: 1, Split: true, Fraction: 1},
		},
		{
			// Most likely this process, but a guess: the whole board is
			// charged, flagged.
			name:  "pids not comparable, one process",
			setup: func(_ *testing.T, d *server.Device) { procs(d, 777) },
			opts:  []nvmlsource.Option{nvmlsource.WithHostPIDs(false)},
			want:  source.Share{Processes: 1, Shared: true},
		},
		{
			name: "in a container, WithProcesses host pids are compared",
			setup: func(_ *testing.T, d *server.Device) {
				procs(d, 777, 778)
				smUtil(d, []nvml.ProcessUtilizationSample{sample(777, 10, 30), sample(778, 10, 70)})
			},
			opts: []nvmlsource.Option{nvmlsource.WithHostPIDs(false), nvmlsource.WithProcesses(777)},
			want: source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.3},
		},
		{
			name:  "in a container, WithProcesses names the lone process",
			setup: func(_ *testing.T, d *server.Device) { procs(d, 777) },
			opts:  []nvmlsource.Option{nvmlsource.WithHostPIDs(false), nvmlsource.WithProcesses(777)},
			want:  source.Share{Processes: 1, Split: true, Fraction: 1},
		},
		{
			name:  "in a container, the lone process is not the WithProcesses one",
			setup: func(_ *testing.T, d *server.Device) { procs(d, 778) },
			opts:  []nvmlsource.Option{nvmlsource.WithHostPIDs(false), nvmlsource.WithProcesses(777)},
			want:  source.Share{Processes: 1, Shared: true},
		},
		{
			name:  "pids not comparable, two processes",
			setup: func(_ *testing.T, d *server.Device) { procs(d, 777, 778) },
			opts:  []nvmlsource.Option{nvmlsource.WithHostPIDs(false)},
			want:  source.Share{Processes: 2, Shared: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, fake := fakeH100(t, steady)
			if tt.setup != nil {
				tt.setup(t, fake[3])
			}
			s := newSource(t, srv, tt.opts...)
			if got := s.Share(3); got != tt.want {
				t.Errorf("Share(3) = %+v, want %+v", got, tt.want)
			}
			if got, want := s.Share(0), (source.Share{Processes: 0, Split: true, Fraction: 1}); got != want {
				t.Errorf("Share(0) of an unused board = %+v, want %+v", got, want)
			}
		})
	}
}

// TestShareSteps follows one board through refreshes: utilization is read
// since the newest sample seen, an idle interval splits evenly, a failed
// listing keeps the split and reports once, and the other process leaving
// makes the board exclusive.
func TestShareSteps(t *testing.T) {
	notes := captureErrors(t)
	me := uint32(os.Getpid())
	srv, fake := fakeH100(t, steady)
	d := fake[0]
	procs(d, me, other)
	seen := smUtil(d,
		[]nvml.ProcessUtilizationSample{sample(me, 100, 30), sample(other, 100, 70)},
		[]nvml.ProcessUtilizationSample{sample(me, 100, 99), sample(me, 200, 90), sample(other, 200, 10)},
	)
	s := newSource(t, srv)

	steps := []struct {
		name      string
		before    func()
		want      source.Share
		wantNotes int
	}{
		{name: "first listing", want: source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.3}},
		{name: "newer samples only", want: source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.9}},
		{name: "idle interval", want: source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.5}},
		{
			name: "listing fails",
			before: func() {
				d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }
			},
			want:      source.Share{Processes: -1, Shared: true, Split: true, Fraction: 0.5},
			wantNotes: 1,
		},
		{name: "still failing, reported once", want: source.Share{Processes: -1, Shared: true, Split: true, Fraction: 0.5}, wantNotes: 1},
		{
			name:      "other process leaves",
			before:    func() { procs(d, me) },
			want:      source.Share{Processes: 1, Split: true, Fraction: 1},
			wantNotes: 1,
		},
	}
	for i, st := range steps {
		if st.before != nil {
			st.before()
		}
		if i > 0 {
			nvmlsource.RefreshShares(s)
		}
		if got := s.Share(0); got != st.want {
			t.Errorf("%s: Share(0) = %+v, want %+v", st.name, got, st.want)
		}
		if got := notes(); len(got) != st.wantNotes {
			t.Errorf("%s: otel.Handle got %v, want %d errors", st.name, got, st.wantNotes)
		}
	}
	if want := []uint64{0, 100, 200, 200}; !equalU64(*seen, want) {
		t.Errorf("GetProcessUtilization lastSeenTimestamps = %v, want %v", *seen, want)
	}
}

// migBoard puts d in MIG mode with one MIG device per entry of lists (in
// slots 0, 2, 4, ... of 7, the others empty), each listing the pids its
// entry holds when the test reads them. ret[j], when set, is what MIG
// device j's listing answers instead; slotRet, when set, is what the
// handle of slot 2 answers.
type migBoard struct {
	lists   [][]uint32
	ret     []nvml.Return
	slotRet nvml.Return
}

func (m *migBoard) install(t *testing.T, d *server.Device) {
	t.Helper()
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode = %v", ret)
	}
	m.ret = make([]nvml.Return, len(m.lists))
	const slots = 7
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return slots, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		if j == 2 && m.slotRet != nvml.SUCCESS {
			return nil, m.slotRet
		}
		if j < 0 || j >= slots {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if j%2 != 0 || j/2 >= len(m.lists) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		k := j / 2
		return &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) { return fmt.Sprintf("MIG-%d", k), nvml.SUCCESS },
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
				if m.ret[k] != nvml.SUCCESS {
					return nil, m.ret[k]
				}
				var infos []nvml.ProcessInfo
				for _, p := range m.lists[k] {
					infos = append(infos, nvml.ProcessInfo{Pid: p})
				}
				return infos, nvml.SUCCESS
			},
		}, nvml.SUCCESS
	}
}

// TestShareMIGSteps follows a MIG board through refreshes. The board is
// exclusive only when the listing is known complete: the parent handle
// answered and every MIG device of the board was listed, and every process
// listed is attributed. Anything less proves nothing, and the exclusive
// share is not kept. A parent listing refused with NO_PERMISSION, the
// usual answer to an unprivileged tenant, is not reported as an error;
// other failures are, once.
func TestShareMIGSteps(t *testing.T) {
	notes := captureErrors(t)
	me := uint32(os.Getpid())
	srv, fake := fakeH100(t, steady)
	d := fake[0]
	mig := &migBoard{lists: [][]uint32{{me}, nil, nil}}
	mig.install(t, d)
	d.GetProcessUtilizationFunc = nil // a call would panic: none under MIG
	procs(d, me)
	s := newSource(t, srv)

	exclusive := source.Share{Processes: 1, Split: true, Fraction: 1}
	steps := []struct {
		name      string
		before    func()
		want      source.Share
		wantNotes int
	}{
		{name: "every MIG device listed, this process only", want: exclusive},
		{
			// A parent list filtered to the caller's own processes must
			// not prove the board theirs.
			name:   "parent lists this process, a MIG device another",
			before: func() { mig.lists[2] = []uint32{other} },
			want:   source.Share{Processes: 2, Shared: true},
		},
		{
			name:   "a MIG device's listing refused",
			before: func() { mig.lists[2] = nil; mig.ret[1] = nvml.ERROR_NO_PERMISSION },
			want:   source.Share{Processes: 1, Shared: true},
		},
		{
			name:   "a MIG slot's handle refused",
			before: func() { mig.ret[1] = nvml.SUCCESS; mig.slotRet = nvml.ERROR_NO_PERMISSION },
			want:   source.Share{Processes: 1, Shared: true},
		},
		{name: "listed whole again", before: func() { mig.slotRet = nvml.SUCCESS }, want: exclusive},
		{
			name: "parent listing refused, the unprivileged answer",
			before: func() {
				d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
			},
			want: source.Share{Processes: -1, Shared: true},
		},
		{
			name: "parent listing fails otherwise",
			before: func() {
				d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }
			},
			want:      source.Share{Processes: -1, Shared: true},
			wantNotes: 1,
		},
		{name: "still failing, reported once", want: source.Share{Processes: -1, Shared: true}, wantNotes: 1},
		{name: "listing empty", before: func() { procs(d); mig.lists[0] = nil }, want: source.Share{Processes: 0, Shared: true}, wantNotes: 1},
		{name: "listed again", before: func() { procs(d, me); mig.lists[0] = []uint32{me} }, want: exclusive, wantNotes: 1},
	}
	for i, st := range steps {
		if st.before != nil {
			st.before()
		}
		if i > 0 {
			nvmlsource.RefreshShares(s)
		}
		if got := s.Share(0); got != st.want {
			t.Errorf("%s: Share(0) = %+v, want %+v", st.name, got, st.want)
		}
		got := notes()
		if len(got) != st.wantNotes {
			t.Errorf("%s: otel.Handle got %v, want %d errors", st.name, got, st.wantNotes)
		}
		for _, err := range got {
			if errors.Is(err, nvml.ERROR_NO_PERMISSION) {
				t.Errorf("%s: otel.Handle got %v: a refused MIG listing is the expected answer, not an error", st.name, err)
			}
		}
	}
}

// TestShareFailingListingExpires checks that a board's last share does not
// outlive a listing that keeps failing: after ListingStale (30 s) of
// failures, an exclusive board is no longer proven so, and is shared and
// unsplit until a listing succeeds again.
func TestShareFailingListingExpires(t *testing.T) {
	captureErrors(t)
	me := uint32(os.Getpid())
	srv, fake := fakeH100(t, steady)
	d := fake[0]
	procs(d, me)
	now := time.Unix(1_000, 0)
	s := newSource(t, srv, nvmlsource.WithShareClock(func() time.Time { return now }))
	exclusive := source.Share{Processes: 1, Split: true, Fraction: 1}
	fail := func() {
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }
	}
	steps := []struct {
		name    string
		advance time.Duration
		before  func()
		want    source.Share
	}{
		{name: "listed", want: exclusive},
		{name: "listing fails", advance: 5 * time.Second, before: fail, want: source.Share{Processes: -1, Split: true, Fraction: 1}},
		{name: "failing just under 30 s", advance: nvmlsource.ListingStale - time.Nanosecond, want: source.Share{Processes: -1, Split: true, Fraction: 1}},
		{name: "failing 30 s", advance: time.Nanosecond, want: source.Share{Processes: -1, Shared: true}},
		{name: "still failing", advance: 5 * time.Second, want: source.Share{Processes: -1, Shared: true}},
		{name: "listed again", advance: 5 * time.Second, before: func() { procs(d, me) }, want: exclusive},
		{name: "fails again: a new run", advance: 5 * time.Second, before: fail, want: source.Share{Processes: -1, Split: true, Fraction: 1}},
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		if st.before != nil {
			st.before()
		}
		if i > 0 {
			nvmlsource.RefreshShares(s)
		}
		if got := s.Share(0); got != st.want {
			t.Errorf("%s: Share(0) = %+v, want %+v", st.name, got, st.want)
		}
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestShareLostBoard checks that a lost board keeps its share and does not
// stop the listing of the boards after it.
func TestShareLostBoard(t *testing.T) {
	me := uint32(os.Getpid())
	srv, fake := fakeH100(t, func(gpu, n int) (uint64, nvml.Return) {
		if gpu == 0 && n > 0 {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return steady(gpu, n)
	})
	s := newSource(t, srv)
	if _, err := s.ReadEnergy(0); !errors.Is(err, source.ErrDeviceLost) {
		t.Fatalf("ReadEnergy(0) = %v, want source.ErrDeviceLost", err)
	}
	before := len(fake[0].GetComputeRunningProcessesCalls())
	procs(fake[0], me, other)
	procs(fake[1], me, other)
	nvmlsource.RefreshShares(s)
	if got, want := s.Share(0), (source.Share{Processes: 0, Split: true, Fraction: 1}); got != want {
		t.Errorf("Share(0) of the lost board = %+v, want its last share %+v", got, want)
	}
	if got := s.Share(1); !got.Shared || got.Processes != 2 {
		t.Errorf("Share(1) = %+v, want the board after the lost one listed again", got)
	}
	if n := len(fake[0].GetComputeRunningProcessesCalls()); n != before {
		t.Errorf("lost board listed %d more times, want 0", n-before)
	}
}

func TestShareOutOfRange(t *testing.T) {
	srv, _ := fakeH100(t, steady)
	s := newSource(t, srv)
	for _, i := range []int{-1, 8, 1 << 20} {
		if got := s.Share(i); got != (source.Share{}) {
			t.Errorf("Share(%d) = %+v, want the zero Share", i, got)
		}
	}
}

// TestShareBackground checks that the listing goroutine refreshes shares on
// its own and that Close stops it; TestMain's goleak check fails the run if
// it outlives Close.
func TestShareBackground(t *testing.T) {
	me := uint32(os.Getpid())
	srv, fake := fakeH100(t, steady)
	var others atomic.Bool
	fake[2].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		if others.Load() {
			return []nvml.ProcessInfo{{Pid: me}, {Pid: other}}, nvml.SUCCESS
		}
		return []nvml.ProcessInfo{{Pid: me}}, nvml.SUCCESS
	}
	s, err := nvmlsource.New(testOpts(srv, nvmlsource.WithShareInterval(time.Millisecond))...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	if got := s.Share(2); got.Shared {
		t.Fatalf("Share(2) = %+v before another process came", got)
	}
	others.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for !s.Share(2).Shared {
		if time.Now().After(deadline) {
			t.Fatalf("Share(2) = %+v 10 s after another process came", s.Share(2))
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	n := len(fake[2].GetComputeRunningProcessesCalls())
	time.Sleep(20 * time.Millisecond)
	if m := len(fake[2].GetComputeRunningProcessesCalls()); m != n {
		t.Errorf("processes listed %d more times after Close", m-n)
	}
}

// TestShareConcurrentSafe races the listing, the sampler's reads and Share
// against Close: no NVML call may follow Shutdown. Run it with -race.
func TestShareConcurrentSafe(t *testing.T) {
	me := uint32(os.Getpid())
	var shutdown atomic.Bool
	after := func(what string) {
		if shutdown.Load() {
			t.Errorf("%s called after Shutdown", what)
		}
	}
	srv, fake := fakeH100(t, func(gpu, n int) (uint64, nvml.Return) {
		after("GetTotalEnergyConsumption")
		return steady(gpu, n)
	})
	for _, d := range fake {
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			after("GetComputeRunningProcesses")
			return []nvml.ProcessInfo{{Pid: me}, {Pid: other}}, nvml.SUCCESS
		}
		d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			after("GetProcessUtilization")
			return []nvml.ProcessUtilizationSample{sample(me, last+1, 30), sample(other, last+1, 70)}, nvml.SUCCESS
		}
	}
	srv.ShutdownFunc = func() nvml.Return {
		shutdown.Store(true)
		return nvml.SUCCESS
	}
	s, err := nvmlsource.New(testOpts(srv, nvmlsource.WithShareInterval(time.Microsecond))...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, f := range []func(){
		func() { nvmlsource.RefreshShares(s) },
		func() {
			for i := range s.Devices() {
				if _, err := s.ReadEnergy(i); err != nil && !errors.Is(err, source.ErrUnavailable) {
					t.Errorf("ReadEnergy(%d) = %v", i, err)
				}
			}
		},
		func() {
			for i := range s.Devices() {
				if sh := s.Share(i); sh.Split && sh.Fraction != 0.3 {
					t.Errorf("Share(%d) = %+v, want Fraction 0.3", i, sh)
				}
			}
		},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					f()
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	time.Sleep(10 * time.Millisecond)
	close(stop)
	wg.Wait()
}

// BenchmarkRefresh lists the processes on the 8 GPUs of the fake DGX H100,
// each shared by this process and one other, with utilization samples; the
// figure includes the mock's own bookkeeping.
func BenchmarkRefresh(b *testing.B) { benchRefresh(b) }

// benchRefresh lists the processes of BenchmarkRefresh's boards under
// opts.
func benchRefresh(b *testing.B, opts ...nvmlsource.Option) {
	me := uint32(os.Getpid())
	srv, fake := fakeH100(b, steady)
	for _, d := range fake {
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: me}, {Pid: other}}, nvml.SUCCESS
		}
		d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return []nvml.ProcessUtilizationSample{sample(me, last+1, 30), sample(other, last+1, 70)}, nvml.SUCCESS
		}
	}
	s, err := nvmlsource.New(testOpts(srv, opts...)...)
	if err != nil {
		b.Fatalf("New() = %v", err)
	}
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		nvmlsource.RefreshShares(s)
	}
}

// TestReadEnergyDuringListingConcurrentSafe holds a listing call inside
// NVML and checks that energy reads go on meanwhile, and that Close, asked
// while the call is in progress, waits for it before Shutdown.
func TestReadEnergyDuringListingConcurrentSafe(t *testing.T) {
	srv, fake := fakeH100(t, steady)
	var inFlight atomic.Int32
	srv.ShutdownFunc = func() nvml.Return {
		if n := inFlight.Load(); n != 0 {
			t.Errorf("Shutdown with %d listing calls in progress", n)
		}
		return nvml.SUCCESS
	}
	s, err := nvmlsource.New(testOpts(srv)...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	fake[0].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		close(entered)
		<-release
		return nil, nvml.SUCCESS
	}
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		nvmlsource.RefreshShares(s)
	}()
	<-entered

	reads := make(chan error, len(fake))
	go func() {
		for i := range s.Devices() {
			_, err := s.ReadEnergy(i)
			reads <- err
		}
	}()
	timeout := time.After(10 * time.Second)
	got := 0
wait:
	for got < len(fake) {
		select {
		case err := <-reads:
			if err != nil {
				t.Errorf("ReadEnergy(%d) during a listing call = %v", got, err)
			}
			got++
		case <-timeout:
			t.Errorf("ReadEnergy(%d) still waiting for the listing's NVML call after 10 s", got)
			break wait
		}
	}

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	close(release)
	<-refreshed
	for ; got < len(fake); got++ {
		<-reads
	}
	if err := <-closed; err != nil {
		t.Errorf("Close() = %v", err)
	}
	if n := len(srv.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
}
