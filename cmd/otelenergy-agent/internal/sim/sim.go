// Package sim is the agent's -simulate mode: a node of simulated GPU
// boards (package simgpu, one single-board GPU each, so that every board
// runs its own processes) with a script of compute processes that come
// and go, each drawing power in proportion to the SM utilization it
// reports. It stands where NVML and /proc stand in the real agent: a
// Source for the library's Monitor, a Lister and a Resolver.
//
// # The script
//
// Board b runs one long-lived server (pid 2000+b) at 30 + 10·(b mod 4) %
// SM, in a Kubernetes pod of its own, busy 40 s of every 60 s; even boards
// also run a trainer (pid 3000+b, 25 %, a plain Docker container) from
// 10 s on. Every 5 s a short job (pid 10000+k, 15 %, 2.5 s, no
// container) starts on board k mod n. The last board of eight or more is
// in MIG mode: its processes are listed per instance and it reports no
// per-process utilization. Each board idles at 70 W and draws 3 W per
// percent of SM utilization on top; no board's processes sum past 100 %.
package sim

import (
	"fmt"
	"sync"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procfs"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/simgpu"
)

const (
	idleWatts     = 70
	wattsPerUtil  = 3
	joulesPerTok  = 0.15
	tick          = 100 * time.Millisecond
	churnEvery    = 5 * time.Second
	churnLife     = 2500 * time.Millisecond
	busyOf, cycle = 40 * time.Second, 60 * time.Second
)

// Node is a simulated node. Its methods are safe for concurrent use.
type Node struct {
	gpus  []*simgpu.GPU
	devs  []otelenergy.Device
	now   func() time.Time
	start time.Time
	mig   int // the MIG board, or -1

	mu    sync.Mutex
	jobs  map[uint32]*simgpu.Job
	churn int // short jobs started so far

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// New returns a node of n boards on the clock now (time.Now when nil).
// It drives no load until [Node.Start] or [Node.Step].
func New(n int, now func() time.Time) (*Node, error) {
	if n < 1 || n > 64 {
		return nil, fmt.Errorf("sim: %d boards; want 1 to 64", n)
	}
	if now == nil {
		now = time.Now
	}
	nd := &Node{now: now, start: now(), mig: -1, jobs: map[uint32]*simgpu.Job{}}
	if n >= 8 {
		nd.mig = n - 1
	}
	for b := range n {
		g, err := simgpu.New(simgpu.Config{
			Devices: 1, IdleWatts: idleWatts, JoulesPerToken: joulesPerTok, NoPrefill: true,
			// A process's active energy is its tokens times their energy,
			// which is its ground truth (ActiveMJ), whatever the batch.
			Decode:   simgpu.DecodePerToken,
			MaxWatts: 1500, Seed: uint64(b + 1), Now: now,
		})
		if err != nil {
			return nil, err
		}
		d := g.Devices()[0]
		d.ID = fmt.Sprintf("GPU-5151a7ed-0000-4000-8000-%012d", b)
		d.Index = b
		d.Name = "Simulated H100"
		nd.gpus = append(nd.gpus, g)
		nd.devs = append(nd.devs, d)
	}
	return nd, nil
}

// proc is one scripted process.
type proc struct {
	board      int
	pid        uint32
	name       string
	container  string
	pod        string
	util       uint32
	from, till time.Duration // till 0: forever
	busyCycle  bool
}

func (nd *Node) script(t time.Duration) []proc {
	var ps []proc
	for b := range nd.gpus {
		ps = append(ps, proc{board: b, pid: uint32(2000 + b), name: "vllm", util: uint32(30 + 10*(b%4)),
			container: fmt.Sprintf("%064x", 0xc0de0000+b), pod: fmt.Sprintf("5151a7ed-0000-4000-8000-%012d", b), busyCycle: true})
		if b%2 == 0 {
			ps = append(ps, proc{board: b, pid: uint32(3000 + b), name: "trainer", util: 25,
				container: fmt.Sprintf("%064x", 0xd0c0000+b), from: 10 * time.Second})
		}
	}
	if k := int(t / churnEvery); k >= 0 {
		from := time.Duration(k) * churnEvery
		ps = append(ps, proc{board: k % len(nd.gpus), pid: uint32(10000 + k), name: "job", util: 15, from: from, till: from + churnLife})
	}
	return ps
}

func (p proc) active(t time.Duration) bool {
	return t >= p.from && (p.till == 0 || t < p.till)
}

func (p proc) utilAt(t time.Duration) uint32 {
	if p.busyCycle && (t+time.Duration(p.board)*7*time.Second)%cycle >= busyOf {
		return 0
	}
	return p.util
}

// Start drives the load every 100 ms on a goroutine until Close.
func (nd *Node) Start() {
	nd.stop, nd.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(nd.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-nd.stop:
				return
			case <-t.C:
				nd.Step()
			}
		}
	}()
}

// Step starts and ends the scripted processes due by now and charges
// each running one's energy for one tick.
func (nd *Node) Step() {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	t := nd.now().Sub(nd.start)
	live := map[uint32]bool{}
	for _, p := range nd.script(t) {
		if !p.active(t) {
			continue
		}
		live[p.pid] = true
		j, ok := nd.jobs[p.pid]
		if !ok {
			j = nd.gpus[p.board].Begin(0)
			nd.jobs[p.pid] = j
		}
		// u % of SM draws u·3 W: over one tick, u·3·0.1 J.
		if u := p.utilAt(t); u > 0 {
			j.Tokens(int(float64(u) * wattsPerUtil * tick.Seconds() / joulesPerTok))
		}
	}
	for pid, j := range nd.jobs {
		if !live[pid] {
			j.End()
			delete(nd.jobs, pid)
		}
	}
}

// Kind returns "simulated": the resource attribute otelenergy.source.
func (nd *Node) Kind() string { return simgpu.SourceKind }

// Devices returns the boards.
func (nd *Node) Devices() []otelenergy.Device { return append([]otelenergy.Device(nil), nd.devs...) }

// ReadEnergy reads board i's simulated counter.
func (nd *Node) ReadEnergy(i int) (uint64, error) {
	if i < 0 || i >= len(nd.gpus) {
		return 0, fmt.Errorf("%w: board %d", otelenergy.ErrRead, i)
	}
	return nd.gpus[i].ReadEnergy(0)
}

// Close stops the load and closes the boards.
func (nd *Node) Close() error {
	nd.once.Do(func() {
		if nd.stop != nil {
			close(nd.stop)
			<-nd.done
		}
		for _, g := range nd.gpus {
			g.Close()
		}
	})
	return nil
}

// Read lists board i's scripted processes at now, each with one
// utilization sample, or under MIG per instance with none.
func (nd *Node) Read(i int, b *nvmlsource.BoardProcesses) error {
	b.Reset()
	if i < 0 || i >= len(nd.gpus) {
		return fmt.Errorf("%w: board %d", otelenergy.ErrRead, i)
	}
	t := nd.now().Sub(nd.start)
	b.MIG = i == nd.mig
	if b.MIG {
		b.Utilization = nvmlsource.UtilUnsupported
	}
	k := 0
	for _, p := range nd.script(t) {
		if p.board != i || !p.active(t) {
			continue
		}
		u := nvmlsource.ProcessUsage{Pid: p.pid, Listed: true}
		if b.MIG {
			u.Instance = fmt.Sprintf("MIG-5151a7ed-0000-4000-8000-%08d%04d", i, k%2)
		} else if su := p.utilAt(t); su > 0 {
			u.SmUtil, u.Samples = uint64(su), 1
		}
		b.Processes = append(b.Processes, u)
		k++
	}
	return nil
}

// ActiveMJ returns the energy that running process pid has drawn above
// the board's idle power so far, the ground truth of its share: its
// simulated tokens times their energy. ok is false for a process not
// running.
func (nd *Node) ActiveMJ(pid uint32) (mj float64, ok bool) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	j, ok := nd.jobs[pid]
	if !ok {
		return 0, false
	}
	return float64(j.OutputTokens()) * joulesPerTok * 1000, true
}

// StartTime returns a scripted process's start time: its pid, since no
// scripted pid is reused.
func (nd *Node) StartTime(pid uint32) (uint64, error) {
	if _, ok := nd.find(pid); !ok {
		return 0, fmt.Errorf("%w: pid %d", procfs.ErrGone, pid)
	}
	return uint64(pid), nil
}

// Info returns a scripted process's identity.
func (nd *Node) Info(pid uint32) (procfs.Info, error) {
	p, ok := nd.find(pid)
	if !ok {
		return procfs.Info{}, fmt.Errorf("%w: pid %d", procfs.ErrGone, pid)
	}
	return procfs.Info{StartTime: uint64(pid), Name: p.name, ContainerID: p.container, PodUID: p.pod}, nil
}

func (nd *Node) find(pid uint32) (proc, bool) {
	for _, p := range nd.script(nd.now().Sub(nd.start)) {
		if p.pid == pid {
			return p, true
		}
	}
	return proc{}, false
}
