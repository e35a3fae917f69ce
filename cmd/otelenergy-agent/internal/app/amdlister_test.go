package app

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/amdsmi"
	"github.com/otelenergy/otelenergy/internal/amdsmi/amdsmitest"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
)

// TestAMDLister lists a fake MI300X's processes: a process's engine time
// since the previous listing over the wall time between the two becomes
// one utilization sample, stamped at the listing; a process's first
// listing, an engine time that went back (a reset) and the listing after
// a failed one give none.
func TestAMDLister(t *testing.T) {
	nd := amdsmitest.NewMI300X(2)
	// The listing the test sets, read under mu: the source's own share
	// listing reads it too, from its goroutine.
	var mu sync.Mutex
	var cur []amdsmi.Process
	fail := false
	nd.ProcessesFunc = func(_ amdsmi.Handle, buf []amdsmi.Process) ([]amdsmi.Process, amdsmi.Status) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return buf[:0], amdsmi.StatusNotSupported
		}
		return append(buf[:0], cur...), amdsmi.StatusSuccess
	}
	s, err := amdsmi.New(amdsmi.WithLib(nd), amdsmi.WithSleep(func(d time.Duration) { nd.Advance(int64(d)) }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(1_700_000_000, 0)
	l := newAMDLister(s, func() time.Time { return now })
	var b nvmlsource.BoardProcesses
	read := func(procs ...amdsmi.Process) error {
		mu.Lock()
		cur = procs
		mu.Unlock()
		return l.Read(0, &b)
	}
	samples := func() map[uint32]uint32 {
		got := map[uint32]uint32{}
		for _, smp := range b.Samples {
			if smp.TimeStamp != uint64(now.UnixMicro()) {
				t.Errorf("sample of pid %d stamped %d, want the listing's %d", smp.Pid, smp.TimeStamp, now.UnixMicro())
			}
			got[smp.Pid] = smp.SmUtil
		}
		return got
	}

	if err := read(amdsmi.Process{Pid: 10}, amdsmi.Process{Pid: 20, GfxNs: 1e9}); err != nil {
		t.Fatal(err)
	}
	if len(b.Processes) != 2 || len(b.Samples) != 0 || b.Utilization != nvmlsource.UtilMeasured {
		t.Fatalf("first listing: %+v; want two listed processes and no sample", b)
	}
	now = now.Add(2 * time.Second)
	if err := read(amdsmi.Process{Pid: 10, GfxNs: 1.2e9}, amdsmi.Process{Pid: 20, GfxNs: 1.4e9}, amdsmi.Process{Pid: 30, GfxNs: 5e8}); err != nil {
		t.Fatal(err)
	}
	if got := samples(); len(got) != 2 || got[10] != 60 || got[20] != 20 {
		t.Fatalf("second listing's utilization %v, want pid 10 at 60%% and pid 20 at 20%%, none for the newcomer 30", got)
	}
	if len(b.Processes) != 3 || b.Processes[0].SmUtil != 60 || b.Processes[0].Samples != 1 {
		t.Fatalf("second listing's processes %+v", b.Processes)
	}
	now = now.Add(time.Second)
	if err := read(amdsmi.Process{Pid: 10, GfxNs: 1e8}, amdsmi.Process{Pid: 30, GfxNs: 1.5e9}, amdsmi.Process{Pid: 30, GfxNs: 1.5e9}); err != nil {
		t.Fatal(err)
	}
	if got := samples(); len(got) != 1 || got[30] != 100 || len(b.Processes) != 2 {
		t.Fatalf("third listing: utilization %v, processes %+v; want only pid 30, at 100%% (capped), listed once, and pid 10's reset skipped", got, b.Processes)
	}

	mu.Lock()
	fail = true
	mu.Unlock()
	now = now.Add(time.Second)
	if err := read(); !errors.Is(err, source.ErrRead) || len(b.Processes) != 0 {
		t.Fatalf("failed listing: %v, %+v; want an error wrapping source.ErrRead and nothing listed", err, b)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	now = now.Add(time.Second)
	if err := read(amdsmi.Process{Pid: 30, GfxNs: 1.6e9}); err != nil || len(b.Samples) != 0 {
		t.Fatalf("listing after a failed one: %v, samples %+v; want none (no previous listing to measure from)", err, b.Samples)
	}
	if err := l.Read(5, &b); !errors.Is(err, source.ErrRead) {
		t.Fatalf("board 5 of 2: %v, want source.ErrRead", err)
	}
}
