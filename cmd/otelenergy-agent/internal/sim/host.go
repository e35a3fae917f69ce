package sim

import (
	"fmt"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procfs"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// tickLen is USER_HZ's clock tick, the unit of /proc's CPU times.
const tickLen = 10 * time.Millisecond

// newHost sets up the host's domains and CPU times: two domains per
// socket, package then DRAM, named as the powercap tree names them; each
// counter starts at a reading of its own within its range, socket 1's
// package close enough to the top that it wraps in the first minute or
// two, as a real counter does at some point.
func (nd *Node) newHost() {
	h := nd.cfg.Host
	if h.Sockets <= 0 {
		return
	}
	for s := range h.Sockets {
		pkg := otelenergy.Device{ID: fmt.Sprintf("intel-rapl:%d", s), Name: fmt.Sprintf("package-%d", s),
			Index: 2 * s, Type: "cpu", CounterMax: packageRangeMJ}
		dram := otelenergy.Device{ID: fmt.Sprintf("intel-rapl:%d:0", s), Name: fmt.Sprintf("dram package-%d", s),
			Index: 2*s + 1, Type: "memory", CounterMax: dramRangeMJ}
		nd.hostDevs = append(nd.hostDevs, pkg, dram)
		base := uint64(118_441_207 + 97_000_000*s)
		if s == 1 {
			base = packageRangeMJ - 9_000_000
		}
		nd.hostBase = append(nd.hostBase, base%(packageRangeMJ+1), uint64(31_009_112+27_762_428*s)%(dramRangeMJ+1))
	}
	nd.hostMJ = make([]float64, len(nd.hostDevs))
	nd.sockBusy = make([]float64, h.Sockets)
	nd.cpuTicks = make([]float64, len(nd.procs))
	up := float64(uptime / tickLen)
	nd.nodeTotal = up * float64(h.CPUs)
	nd.nodeBusy = 0.04 * nd.nodeTotal
	for k := range nd.procs {
		// A process started before the node's start ran at half its
		// busy cores until then.
		if st := nd.procs[k].started(); st < 0 {
			nd.cpuTicks[k] = nd.procs[k].CPU / 2 * float64(-st/tickLen)
		}
	}
}

// hostStart begins a tick's CPU accounting.
func (nd *Node) hostStart() {
	clear(nd.sockBusy)
}

// hostProc charges process k's cores over a tick of length tk, at its
// unscaled level l: its CPU work does not wait for the SMs it shares.
func (nd *Node) hostProc(k int, l Level, tk time.Duration) {
	if nd.sockBusy == nil {
		return
	}
	pr := &nd.procs[k]
	cores := pr.CPU / 5
	if l.SM > 0 || l.Mem > 0 || l.Enc > 0 || l.Dec > 0 {
		cores = pr.CPU
	}
	nd.cpuTicks[k] += cores * float64(tk) / float64(tickLen)
	nd.sockBusy[pr.Board*len(nd.sockBusy)/len(nd.boards)] += cores
}

// hostEnd ends a tick of length tk: the node's CPU times advance, and
// each domain draws its idle power and its busy cores' part.
func (nd *Node) hostEnd(tk time.Duration) {
	if nd.sockBusy == nil {
		return
	}
	h := nd.cfg.Host
	ticks := float64(tk) / float64(tickLen)
	var busy float64
	for s := range nd.sockBusy {
		nd.sockBusy[s] += h.OtherCores / float64(h.Sockets)
		busy += nd.sockBusy[s]
		mj := tk.Seconds() * 1000
		nd.hostMJ[2*s] += (h.PackageIdleWatts + h.PackageCoreWatts*nd.sockBusy[s]) * mj
		nd.hostMJ[2*s+1] += (h.DRAMIdleWatts + h.DRAMCoreWatts*nd.sockBusy[s]) * mj
	}
	nd.nodeBusy += min(busy, float64(h.CPUs)) * ticks
	nd.nodeTotal += float64(h.CPUs) * ticks
}

// Host returns the host's RAPL domains as a Source, for the agent's host
// split (package hostshare): hw.type cpu for each package and memory for
// its DRAM, each a counter in mJ that wraps at its range as RAPL's does.
// It is nil on a node without host domains. It reads the node, so it
// shares the node's clock and load; its Close does nothing.
func (nd *Node) Host() otelenergy.Source {
	if len(nd.hostDevs) == 0 {
		return nil
	}
	return hostSource{nd}
}

// hostSource is [Node.Host]'s Source.
type hostSource struct{ nd *Node }

func (h hostSource) Kind() string { return SourceKind }

func (h hostSource) Devices() []otelenergy.Device {
	return append([]otelenergy.Device(nil), h.nd.hostDevs...)
}

func (h hostSource) ReadEnergy(i int) (uint64, error) {
	nd := h.nd
	if i < 0 || i >= len(nd.hostDevs) {
		return 0, fmt.Errorf("%w: host domain %d", otelenergy.ErrRead, i)
	}
	nd.Step()
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return (nd.hostBase[i] + uint64(nd.hostMJ[i])) % (nd.hostDevs[i].CounterMax + 1), nil
}

func (h hostSource) Close() error { return nil }

// NodeTicks returns the node's busy and total CPU ticks since boot, as
// /proc/stat's first line sums them.
func (nd *Node) NodeTicks() (busy, total uint64, err error) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.sockBusy == nil {
		return 0, 0, fmt.Errorf("sim: no host domains")
	}
	return uint64(nd.nodeBusy), uint64(nd.nodeTotal), nil
}

// CPUTicks returns a running scripted process's CPU ticks (utime +
// stime) and its start time, as /proc/<pid>/stat's fields 14, 15 and 22.
func (nd *Node) CPUTicks(pid uint32) (ticks, start uint64, err error) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	for _, k := range nd.live {
		if p := &nd.procs[k]; p.Pid == pid && p.active(nd.last) {
			if nd.cpuTicks == nil {
				return 0, nd.startTicks(p), nil
			}
			return uint64(nd.cpuTicks[k]), nd.startTicks(p), nil
		}
	}
	return 0, 0, fmt.Errorf("%w: pid %d", procfs.ErrGone, pid)
}
