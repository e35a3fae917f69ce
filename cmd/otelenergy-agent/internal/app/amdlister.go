package app

import (
	"math"
	"time"

	"github.com/otelenergy/otelenergy/internal/amdsmi"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
)

// amdLister lists an AMD SMI source's processes to the agent. AMD SMI
// gives each process's cumulative graphics-engine time, not NVML's
// utilization samples, so each listing becomes one sample per process
// seen at the previous listing too: its engine time since then over the
// wall time between the two listings, in percent, stamped now (wall
// clock µs, as NVML stamps its samples), which the agent aligns with the
// counter's intervals as it does NVML's. A process's first listing gives
// no sample, as the engine time before it is not this interval's. Read is
// called from the agent's pass only.
type amdLister struct {
	src *amdsmi.Source
	now func() time.Time
	buf []amdsmi.Process
	// prev and next hold, per board, each pid's engine time at the
	// previous listing and at this one; swapped after each listing.
	prev, next []map[uint32]uint64
	prevT      []time.Time
}

func newAMDLister(src *amdsmi.Source, now func() time.Time) *amdLister {
	n := len(src.Devices())
	l := &amdLister{src: src, now: now, prev: make([]map[uint32]uint64, n), next: make([]map[uint32]uint64, n), prevT: make([]time.Time, n)}
	for i := range n {
		l.prev[i], l.next[i] = map[uint32]uint64{}, map[uint32]uint64{}
	}
	return l
}

func (l *amdLister) Read(i int, b *nvmlsource.BoardProcesses) error {
	b.Reset()
	procs, err := l.src.ListProcesses(i, l.buf)
	l.buf = procs
	if err != nil {
		if i >= 0 && i < len(l.prev) {
			// The next listing's engine times are not this one's deltas.
			clear(l.prev[i])
			l.prevT[i] = time.Time{}
		}
		return err
	}
	t := l.now()
	prev, next := l.prev[i], l.next[i]
	clear(next)
	dt := t.Sub(l.prevT[i])
	stamp := uint64(t.UnixMicro())
	for _, p := range procs {
		if _, dup := next[p.Pid]; dup {
			continue
		}
		next[p.Pid] = p.GfxNs
		b.Processes = append(b.Processes, nvmlsource.ProcessUsage{Pid: p.Pid, Listed: true})
		was, ok := prev[p.Pid]
		if !ok || l.prevT[i].IsZero() || dt <= 0 || p.GfxNs < was {
			continue
		}
		u := uint32(min(100, math.Round(100*float64(p.GfxNs-was)/float64(dt.Nanoseconds()))))
		b.Samples = append(b.Samples, nvmlsource.Sample{Pid: p.Pid, TimeStamp: stamp, SmUtil: u})
		pu := &b.Processes[len(b.Processes)-1]
		pu.SmUtil += uint64(u)
		pu.Samples++
	}
	b.Utilization = nvmlsource.UtilMeasured
	l.prev[i], l.next[i] = next, prev
	l.prevT[i] = t
	return nil
}
