package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procfs"
	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// SourceKind is what [Node.Kind] returns: the resource attribute
// otelenergy.source of a simulated node.
const SourceKind = "simulated"

// Physics are the simulated boards' physics: the knobs that decide how
// far the agent's view (utilization samples, counter steps) is from the
// truth (each process's power).
type Physics struct {
	// IdleWatts is what a board draws with no process busy on it.
	IdleWatts float64
	// SMWatts, MemWatts, EncWatts and DecWatts are the power each
	// percent of a process's SM, memory, encoder and decoder utilization
	// draws, in W. With MemWatts zero, power follows SM utilization
	// alone; with MemWatts positive, memory-bound work (whose memory
	// utilization is high) draws more per percent of SM than
	// compute-bound work.
	SMWatts, MemWatts, EncWatts, DecWatts float64
	// NoiseWatts is the standard deviation of a white noise on each
	// board's power, drawn every tick: the board's own
	// fluctuation, which no utilization shows.
	NoiseWatts float64
	// SamplePeriod is the driver's utilization sampling period: each
	// sample is a process's mean utilization over one period, stamped at
	// its end. NVML's is 1/6 s to 1 s by product.
	SamplePeriod time.Duration
	// SampleLag is how long after its timestamp a sample becomes visible
	// to GetProcessUtilization.
	SampleLag time.Duration
	// CounterPeriod is the energy counter's update period: it is a
	// staircase that steps every period, at a phase of its own per board.
	CounterPeriod time.Duration
	// Tick is the simulation's time step, 1 ms when zero: power, counter
	// updates and samples happen on its grid.
	Tick time.Duration

	// The knobs below give physics the agent's linear model does not
	// share (held-out physics).

	// SatWatts, when positive, saturates each board's active power:
	// SatWatts·(1 − exp(−ΣSM/SatSM)) over the processes' summed SM
	// utilization, shared among them in proportion to the linear draw
	// above (each process's truth).
	SatWatts, SatSM float64
	// StampJitter, when positive, delays each sample's timestamp by a
	// uniform 0 to StampJitter, drawn per sample, as the driver stamps
	// each process a few µs apart.
	StampJitter time.Duration
	// PerPidInstants samples each process at an instant of its own: at
	// the board's period, at a phase drawn from its pid.
	PerPidInstants bool
	// WallStep, at WallStepAt, steps the wall clock that stamps the
	// samples (and that WallClock and Read's cursor read), as NTP may:
	// the ring's monotonic time, and the node's, do not step.
	WallStep, WallStepAt time.Duration

	// The knobs below make -simulate's boards draw like real ones.

	// IdleSpreadWatts, when positive, spreads the boards' idle power over
	// IdleWatts ± IdleSpreadWatts, fixed per board: identical boards
	// differ by a few watts.
	IdleSpreadWatts float64
	// TimeSlice shares a board's SMs among its processes as the driver's
	// time-slicing does: when their SM utilization would sum past 100 %,
	// each process's utilization (SM, memory, encoder, decoder) is scaled
	// down by the same factor, and so is what it draws and what its
	// samples show.
	TimeSlice bool
}

// DefaultPhysics are -simulate's physics, an H100 SXM's: an idle of
// 115 ± 8 W per board, a board's with its driver loaded and a CUDA
// context held (60-80 W bare, 90-130 W with a context; a public vLLM run
// on one H100 idles at 122.7 W), with or without a process listed, so
// that the idle power the agent learns from the seconds a board lists no
// process is the idle of the seconds it lists an idle server;
// 5.5 W per percent of SM, less 3 W per percent of memory utilization
// (every scripted process's memory utilization is at most its SM's, so
// SM time spent waiting on memory draws 2.5 W per percent: a decode
// draws less than a GEMM at the same SM utilization); time-sliced SMs;
// a 2 W noise; samples every 1/6 s, visible 400 ms after their stamps; a
// counter that steps every 100 ms; on a 10 ms grid (a finer one costs the
// simulator, not the agent, more CPU). A board serving alone draws about
// 350-465 W, training alone about 570 W, and both about 500 W, the
// plateaus a real H100 shows.
var DefaultPhysics = Physics{IdleWatts: 115, IdleSpreadWatts: 8, SMWatts: 5.5, MemWatts: -3, NoiseWatts: 2,
	SamplePeriod: time.Second / 6, SampleLag: 400 * time.Millisecond, CounterPeriod: 100 * time.Millisecond, Tick: 10 * time.Millisecond,
	TimeSlice: true}

// Level is a process's utilization, in percent, from At (since the
// process started) until the next Level.
type Level struct {
	At                time.Duration
	SM, Mem, Enc, Dec float64
}

// Proc is one scripted process: the board it runs on, its identity, when
// it runs and how it uses the board.
type Proc struct {
	Board          int
	Pid            uint32
	Name           string
	Container, Pod string
	// From and Till bound when it is listed; Till 0 is forever.
	From, Till time.Duration
	// Levels is its utilization over its life, sorted by At; before the
	// first Level, and with none, it is listed but idle.
	Levels []Level
	// Period, when positive, repeats Levels every Period.
	Period time.Duration
	// Draw, when positive, scales the power its utilization draws: a
	// memory-bound decode draws less per percent than the Physics say,
	// a trainer more, and no utilization shows it.
	Draw float64
	// Started is when the process started, since the node's start; zero
	// is From. A server already running when the agent starts has a
	// negative one. Its process.creation.time is the node's start plus
	// Started on the wall clock.
	Started time.Duration
	// CPU is the host CPU cores it keeps busy while it uses the board
	// (its level has any utilization), a fifth of that while it is
	// listed but idle: tokenizing, scheduling, loading data. It counts
	// only on a node with host domains ([Config.Host]).
	CPU float64
}

// started is when p started, since the node's start.
func (p *Proc) started() time.Duration {
	if p.Started == 0 {
		return p.From
	}
	return p.Started
}

func (p *Proc) active(t time.Duration) bool {
	return t >= p.From && (p.Till == 0 || t < p.Till)
}

// level returns p's utilization at t (since the node started).
func (p *Proc) level(t time.Duration) Level {
	at := t - p.From
	if p.Period > 0 {
		at %= p.Period
	}
	k := sort.Search(len(p.Levels), func(k int) bool { return p.Levels[k].At > at })
	if k == 0 {
		return Level{}
	}
	return p.Levels[k-1]
}

// Config describes a simulated node.
type Config struct {
	// Boards is the number of boards, 1 to 64.
	Boards int
	// Physics; the zero value selects DefaultPhysics, and zero periods
	// select its periods.
	Physics Physics
	// Procs is the script; nil selects the default script (see the
	// package doc) for Boards boards.
	Procs []Proc
	// MIG lists the boards in MIG mode: their processes are listed per
	// instance (two per board) and they give no per-process utilization.
	// With Procs nil, the last board of eight or more.
	MIG []int
	// Now is the clock; nil selects time.Now.
	Now func() time.Time
	// Seed seeds the noise.
	Seed uint64
	// Host, with Sockets positive, simulates the host's RAPL domains (a
	// package and its DRAM per socket) and the CPU time of the node and
	// of each process, for the agent's host split: see [Node.Host]. With
	// Procs nil, [DefaultHost].
	Host Host
}

// Host is a simulated host's CPU packages and DRAM: each socket draws its
// idle power plus a part per busy core on it, and a process's cores are on
// the socket of its board (boards split evenly over the sockets, as their
// PCIe lanes are).
type Host struct {
	// Sockets is the number of CPU packages, each with its DRAM; zero
	// simulates no host.
	Sockets int
	// CPUs is the node's logical CPUs, the ticks /proc/stat counts.
	CPUs int
	// PackageIdleWatts and PackageCoreWatts are a package's power with no
	// busy core, and what each busy core adds; DRAMIdleWatts and
	// DRAMCoreWatts the same for its DRAM.
	PackageIdleWatts, PackageCoreWatts float64
	DRAMIdleWatts, DRAMCoreWatts       float64
	// OtherCores are the cores busy with processes the agent does not
	// track (the kubelet, the container runtime, sshd), spread over the
	// sockets.
	OtherCores float64
}

// DefaultHost is -simulate's host, a DGX H100's: two 56-core Xeon
// packages (224 logical CPUs) idling at about 96 W each with their DRAM at
// 17 W, and 1.5 cores busy with processes that use no GPU.
var DefaultHost = Host{Sockets: 2, CPUs: 224, PackageIdleWatts: 96, PackageCoreWatts: 2.6, DRAMIdleWatts: 17, DRAMCoreWatts: 0.45, OtherCores: 1.5}

// uptime is how long the simulated node has been up when it starts, so
// that process start times count from a boot in the past, as on a real
// node.
const uptime = 3*24*time.Hour + 4*time.Hour + 17*time.Minute + 23*time.Second

// RAPL counters' ranges, max_energy_range_uj in mJ, as a Xeon's package
// and DRAM domains report them.
const (
	packageRangeMJ = 262_143_328
	dramRangeMJ    = 65_712_999
)

// Node is a simulated node. Its methods are safe for concurrent use.
type Node struct {
	cfg   Config
	ph    Physics
	devs  []otelenergy.Device
	now   func() time.Time
	start time.Time

	mu      sync.Mutex
	last    time.Duration // the last Step's time since start
	rng     *rand.Rand
	boards  []boardState
	procs   []Proc
	truthMJ []float64 // per process: its energy above idle so far
	integ   [][4]float64
	pidNext []time.Duration // PerPidInstants: each process's next sample end
	pidFrom []time.Duration // and its span's start
	cursors []nvmlsource.SampleCursor
	next    int   // the first process, in order of From, not yet live
	live    []int // the processes that may draw or have a sample due
	boot    time.Time

	// The host, with cfg.Host.Sockets positive.
	hostDevs  []otelenergy.Device
	hostMJ    []float64 // per domain (package and DRAM of each socket): energy so far, exact
	hostBase  []uint64  // each counter's reading at the start, below its range
	cpuTicks  []float64 // per process: its CPU ticks so far
	nodeBusy  float64   // the node's busy and all CPU ticks since boot
	nodeTotal float64
	sockBusy  []float64 // this tick's busy cores per socket

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type boardState struct {
	mig      bool
	idleW    float64 // its idle power, W
	accMJ    float64 // energy drawn so far, exact
	counter  uint64  // the counter's reading: accMJ at its last update
	idleMJ   float64 // the idle part of accMJ
	phase    time.Duration
	nextStep time.Duration // the counter's next update
	nextSmp  time.Duration // the next utilization sample's end
	spanFrom time.Duration // the current sample span's start
	samples  []pending
	sumSM    float64 // this tick's summed SM utilization
	sumW     float64 // and linear draw
	rawSM    float64 // this tick's summed SM utilization before time-slicing
	slice    float64 // and the factor time-slicing scales it by
}

// pending is a sample and when it becomes visible.
type pending struct {
	s       nvmlsource.Sample
	visible time.Duration
}

// New returns a node of n boards on the clock now (time.Now when nil)
// running the default script with [DefaultPhysics]. It drives no load
// until [Node.Start] or [Node.Step].
func New(n int, now func() time.Time) (*Node, error) {
	return NewNode(Config{Boards: n, Now: now})
}

// NewNode returns the node cfg describes.
func NewNode(cfg Config) (*Node, error) {
	n := cfg.Boards
	if n < 1 || n > 64 {
		return nil, fmt.Errorf("sim: %d boards; want 1 to 64", n)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ph := cfg.Physics
	if ph == (Physics{}) {
		ph = DefaultPhysics
	}
	if ph.SamplePeriod <= 0 {
		ph.SamplePeriod = DefaultPhysics.SamplePeriod
	}
	if ph.CounterPeriod <= 0 {
		ph.CounterPeriod = DefaultPhysics.CounterPeriod
	}
	if ph.Tick <= 0 {
		ph.Tick = time.Millisecond
	}
	if cfg.Procs == nil {
		cfg.Procs = DefaultScript(n)
		if n >= 8 && cfg.MIG == nil {
			cfg.MIG = []int{n - 1}
		}
		if cfg.Host == (Host{}) {
			cfg.Host = DefaultHost
		}
	}
	if h := cfg.Host; h.Sockets < 0 || h.Sockets > 0 && h.CPUs < 1 {
		return nil, fmt.Errorf("sim: host of %d sockets and %d CPUs", h.Sockets, h.CPUs)
	}
	start := cfg.Now()
	nd := &Node{cfg: cfg, ph: ph, now: cfg.Now, start: start, procs: cfg.Procs, boot: start.Add(-uptime),
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x5151)), cursors: make([]nvmlsource.SampleCursor, n)}
	// The spread is drawn apart from the noise, whose sequence the
	// bench's figures depend on.
	spread := rand.New(rand.NewPCG(cfg.Seed, 0x1d1e))
	nd.procs = slices.Clone(nd.procs)
	slices.SortStableFunc(nd.procs, func(a, b Proc) int { return int(a.From - b.From) })
	nd.truthMJ = make([]float64, len(nd.procs))
	nd.integ = make([][4]float64, len(nd.procs))
	nd.pidNext = make([]time.Duration, len(nd.procs))
	nd.pidFrom = make([]time.Duration, len(nd.procs))
	for b := range n {
		d := otelenergy.Device{
			ID: fmt.Sprintf("GPU-5151a7ed-0000-4000-8000-%012d", b), Index: b,
			Name: "Simulated H100", Vendor: "NVIDIA", Type: "gpu", MaxWatts: 1500,
		}
		nd.devs = append(nd.devs, d)
		// Each board's counter and sampler run at a phase of their own.
		phase := time.Duration(b*37%100) * time.Millisecond
		idle := ph.IdleWatts
		if ph.IdleSpreadWatts > 0 {
			idle += ph.IdleSpreadWatts * (2*spread.Float64() - 1)
		}
		nd.boards = append(nd.boards, boardState{phase: phase, idleW: idle,
			nextStep: phase + ph.CounterPeriod, nextSmp: phase + ph.SamplePeriod, spanFrom: phase})
	}
	nd.newHost()
	for _, m := range cfg.MIG {
		if m >= 0 && m < n {
			nd.boards[m].mig = true
		}
	}
	return nd, nil
}

// Start drives the load on a goroutine until Close, waking every 100 ms
// (each Step runs every tick since the previous one).
func (nd *Node) Start() {
	nd.stop, nd.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(nd.done)
		t := time.NewTicker(100 * time.Millisecond)
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

// Step runs the node from the previous Step to now, tick by tick: each
// process draws its power, each counter steps at its updates, and each
// board's driver takes its utilization samples.
func (nd *Node) Step() {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	tk := nd.ph.Tick
	t := nd.now().Sub(nd.start).Truncate(tk)
	for nd.last < t {
		nd.last += tk
		nd.tick(nd.last)
	}
}

// tick advances the node by the tick that ends at t.
func (nd *Node) tick(t time.Duration) {
	tk := nd.ph.Tick
	dt := tk.Seconds()
	ms := float64(tk) / float64(time.Millisecond)
	for nd.next < len(nd.procs) && nd.procs[nd.next].From < t {
		nd.live = append(nd.live, nd.next)
		nd.next++
	}
	for b := range nd.boards {
		bs := &nd.boards[b]
		bs.sumSM, bs.sumW, bs.rawSM = 0, 0, 0
	}
	if nd.ph.TimeSlice {
		for _, k := range nd.live {
			if pr := &nd.procs[k]; pr.active(t - tk) {
				nd.boards[pr.Board].rawSM += pr.level(t - tk).SM
			}
		}
	}
	for b := range nd.boards {
		bs := &nd.boards[b]
		bs.slice = 1
		if bs.rawSM > 100 {
			bs.slice = 100 / bs.rawSM
		}
		p := bs.idleW
		if nd.ph.NoiseWatts > 0 {
			p += nd.rng.NormFloat64() * nd.ph.NoiseWatts
		}
		bs.idleMJ += bs.idleW * dt * 1000
		bs.accMJ += p * dt * 1000
	}
	for _, k := range nd.live {
		pr := &nd.procs[k]
		if !pr.active(t - tk) {
			continue
		}
		bs := &nd.boards[pr.Board]
		l := pr.level(t - tk).scaled(bs.slice)
		bs.sumSM += l.SM
		bs.sumW += nd.draw(pr, l)
	}
	nd.hostStart()
	for _, k := range nd.live {
		pr := &nd.procs[k]
		if !pr.active(t - tk) {
			continue
		}
		raw := pr.level(t - tk)
		nd.hostProc(k, raw, tk)
		l := raw.scaled(nd.boards[pr.Board].slice)
		w := nd.draw(pr, l)
		if bs := &nd.boards[pr.Board]; nd.ph.SatWatts > 0 && bs.sumW > 0 {
			w = nd.ph.SatWatts * (1 - math.Exp(-bs.sumSM/nd.ph.SatSM)) * w / bs.sumW
		}
		nd.truthMJ[k] += w * dt * 1000
		nd.boards[pr.Board].accMJ += w * dt * 1000
		if nd.ph.PerPidInstants && nd.pidNext[k] == 0 {
			// The first span starts with the process, at a phase of its
			// own (on the tick grid).
			ph := time.Duration(pr.Pid*7919) % nd.ph.SamplePeriod
			nd.pidFrom[k], nd.pidNext[k] = t-tk, t-tk+ph.Truncate(tk)+tk
		}
		in := &nd.integ[k]
		in[0] += l.SM * ms
		in[1] += l.Mem * ms
		in[2] += l.Enc * ms
		in[3] += l.Dec * ms
	}
	nd.hostEnd(tk)
	for b := range nd.boards {
		bs := &nd.boards[b]
		if t >= bs.nextStep {
			bs.counter = uint64(bs.accMJ)
			bs.nextStep += nd.ph.CounterPeriod
		}
		if !nd.ph.PerPidInstants && t >= bs.nextSmp {
			nd.sample(b, t)
			bs.spanFrom, bs.nextSmp = t, bs.nextSmp+nd.ph.SamplePeriod
		}
	}
	if nd.ph.PerPidInstants {
		for _, k := range nd.live {
			if nd.pidNext[k] != 0 && t >= nd.pidNext[k] {
				nd.sampleOne(k, t, t-nd.pidFrom[k])
				nd.pidFrom[k], nd.pidNext[k] = t, nd.pidNext[k]+nd.ph.SamplePeriod
			}
		}
	}
	// Forget samples no reader can still want, and processes that ended
	// before the last sample span.
	if t%time.Second < tk {
		nd.live = slices.DeleteFunc(nd.live, func(k int) bool {
			p := &nd.procs[k]
			return p.Till > 0 && p.Till < t-2*nd.ph.SamplePeriod
		})
		for b := range nd.boards {
			bs := &nd.boards[b]
			k := 0
			for k < len(bs.samples) && bs.samples[k].visible < t-10*time.Second {
				k++
			}
			bs.samples = append(bs.samples[:0], bs.samples[k:]...)
		}
	}
}

// scaled is l with every utilization scaled by f, as time-slicing scales
// a process's share of the board.
func (l Level) scaled(f float64) Level {
	if f == 1 {
		return l
	}
	return Level{At: l.At, SM: l.SM * f, Mem: l.Mem * f, Enc: l.Enc * f, Dec: l.Dec * f}
}

// sample records board b's samples for the span that ends at t: one per
// process with non-zero use in it, its mean utilization rounded to a
// percent, as NVML's driver keeps them.
func (nd *Node) sample(b int, t time.Duration) {
	bs := &nd.boards[b]
	for _, k := range nd.live {
		if nd.procs[k].Board == b {
			nd.sampleOne(k, t, t-bs.spanFrom)
		}
	}
}

// sampleOne records process k's sample for the span of length span that
// ends at t.
func (nd *Node) sampleOne(k int, t, span time.Duration) {
	pr := &nd.procs[k]
	bs := &nd.boards[pr.Board]
	in := nd.integ[k]
	nd.integ[k] = [4]float64{}
	if bs.mig || (in[0] == 0 && in[1] == 0 && in[2] == 0 && in[3] == 0) {
		return
	}
	ms := float64(span / time.Millisecond)
	r := func(x float64) uint32 { return uint32(math.Round(x / ms)) }
	at := nd.start.Add(t).Add(nd.wallStep(t))
	if nd.ph.StampJitter > 0 {
		at = at.Add(time.Duration(nd.rng.Int64N(int64(nd.ph.StampJitter) + 1)))
	}
	s := nvmlsource.Sample{Pid: pr.Pid, TimeStamp: uint64(at.UnixMicro()), SmUtil: r(in[0]), MemUtil: r(in[1]), EncUtil: r(in[2]), DecUtil: r(in[3])}
	bs.samples = append(bs.samples, pending{s: s, visible: t + nd.ph.SampleLag})
}

// draw is the power process pr draws at utilization l before any
// saturation, in W.
func (nd *Node) draw(pr *Proc, l Level) float64 {
	w := nd.ph.SMWatts*l.SM + nd.ph.MemWatts*l.Mem + nd.ph.EncWatts*l.Enc + nd.ph.DecWatts*l.Dec
	if pr.Draw > 0 {
		w *= pr.Draw
	}
	return w
}

// wallStep is the wall clock's step at t since start.
func (nd *Node) wallStep(t time.Duration) time.Duration {
	if nd.ph.WallStep != 0 && t >= nd.ph.WallStepAt {
		return nd.ph.WallStep
	}
	return 0
}

// WallClock returns the wall clock that stamps the samples at the
// node's time now: the clock with WallStep applied from WallStepAt.
func (nd *Node) WallClock(now time.Time) time.Time {
	return now.Add(nd.wallStep(now.Sub(nd.start)))
}

// Kind returns [SourceKind].
func (nd *Node) Kind() string { return SourceKind }

// Devices returns the boards.
func (nd *Node) Devices() []otelenergy.Device { return append([]otelenergy.Device(nil), nd.devs...) }

// ReadEnergy reads board i's counter, after running the node up to now:
// so the counter a read sees is the staircase at its true instants,
// however late the load goroutine runs on a busy machine.
func (nd *Node) ReadEnergy(i int) (uint64, error) {
	if i < 0 || i >= len(nd.boards) {
		return 0, fmt.Errorf("%w: board %d", otelenergy.ErrRead, i)
	}
	nd.Step()
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.boards[i].counter, nil
}

// Close stops the load.
func (nd *Node) Close() error {
	nd.once.Do(func() {
		if nd.stop != nil {
			close(nd.stop)
			<-nd.done
		}
	})
	return nil
}

// Read runs the node up to now and lists board i's processes as a
// [nvmlsource.ProcessReader] would: the processes running, and the
// utilization samples visible by now that its [nvmlsource.SampleCursor]
// takes, the reader's own: those stamped after the query it gives for the
// node's time (the monotonic clock) and its wall clock, not taken before.
// Under MIG the processes are listed per instance with no samples.
func (nd *Node) Read(i int, b *nvmlsource.BoardProcesses) error {
	b.Reset()
	if i < 0 || i >= len(nd.boards) {
		return fmt.Errorf("%w: board %d", otelenergy.ErrRead, i)
	}
	nd.Step()
	nd.mu.Lock()
	defer nd.mu.Unlock()
	t := nd.last
	bs := &nd.boards[i]
	b.MIG = bs.mig
	if b.MIG {
		b.Utilization = nvmlsource.UtilUnsupported
	}
	k := 0
	for _, j := range nd.live {
		p := &nd.procs[j]
		if p.Board != i || !p.active(t) {
			continue
		}
		u := nvmlsource.ProcessUsage{Pid: p.Pid, Listed: true}
		if b.MIG {
			u.Instance = fmt.Sprintf("MIG-5151a7ed-0000-4000-8000-%08d%04d", i, k%2)
		}
		b.Processes = append(b.Processes, u)
		k++
	}
	// The driver answers GetProcessUtilization(q) with the samples
	// visible and stamped after q.
	cur := &nd.cursors[i]
	q := cur.Since(t, nd.start.Add(t).Add(nd.wallStep(t)))
	for _, ps := range bs.samples {
		if ps.visible > t || ps.s.TimeStamp <= q || !cur.Take(ps.s.Pid, ps.s.TimeStamp) {
			continue
		}
		b.Samples = append(b.Samples, ps.s)
		var u *nvmlsource.ProcessUsage
		for k := range b.Processes {
			if b.Processes[k].Pid == ps.s.Pid {
				u = &b.Processes[k]
			}
		}
		if u == nil {
			b.Processes = append(b.Processes, nvmlsource.ProcessUsage{Pid: ps.s.Pid})
			u = &b.Processes[len(b.Processes)-1]
		}
		u.SmUtil += uint64(ps.s.SmUtil)
		u.Samples++
	}
	return nil
}

// TruthMJ returns the energy process pid (the first scripted process with
// that pid) has drawn above its board's idle power so far: the ground
// truth of its share. ok is false for a pid not in the script.
func (nd *Node) TruthMJ(pid uint32) (mj float64, ok bool) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	for k := range nd.procs {
		if nd.procs[k].Pid == pid {
			return nd.truthMJ[k], true
		}
	}
	return 0, false
}

// ActiveMJ returns the energy running process pid has drawn above idle so
// far; ok is false for a process not running.
func (nd *Node) ActiveMJ(pid uint32) (mj float64, ok bool) {
	nd.mu.Lock()
	t := nd.last
	running := false
	for k := range nd.procs {
		if nd.procs[k].Pid == pid && nd.procs[k].active(t) {
			running = true
		}
	}
	nd.mu.Unlock()
	if !running {
		return 0, false
	}
	return nd.TruthMJ(pid)
}

// BoardTruth is one board's true figures so far, in mJ.
type BoardTruth struct {
	// EnergyMJ is all the board drew; IdleMJ its idle part.
	EnergyMJ, IdleMJ float64
}

// Board returns board i's true figures so far.
func (nd *Node) Board(i int) BoardTruth {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return BoardTruth{EnergyMJ: nd.boards[i].accMJ, IdleMJ: nd.boards[i].idleMJ}
}

// IdleWatts returns board i's idle power: [Physics.IdleWatts] and its
// spread.
func (nd *Node) IdleWatts(i int) float64 { return nd.boards[i].idleW }

// Procs returns the script.
func (nd *Node) Procs() []Proc { return nd.procs }

// BootTime returns when the simulated node booted, some days before it
// started, on its wall clock at the last Step: as /proc/stat's btime, the
// wall clock now less the time since boot, it moves with a step of the
// wall clock (Physics.WallStep). Start times count from it.
func (nd *Node) BootTime() (time.Time, error) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.boot.Add(nd.wallStep(nd.last)), nil
}

// StartTime returns a running scripted process's start time, in clock
// ticks since [Node.BootTime], as /proc/<pid>/stat's field 22.
func (nd *Node) StartTime(pid uint32) (uint64, error) {
	p, ok := nd.find(pid)
	if !ok {
		return 0, fmt.Errorf("%w: pid %d", procfs.ErrGone, pid)
	}
	return nd.startTicks(p), nil
}

// StartTicks returns the start time [Node.StartTime] gives the first
// scripted process with pid, whether or not it runs; ok is false for a
// pid not in the script.
func (nd *Node) StartTicks(pid uint32) (ticks uint64, ok bool) {
	for k := range nd.procs {
		if nd.procs[k].Pid == pid {
			return nd.startTicks(&nd.procs[k]), true
		}
	}
	return 0, false
}

// startTicks is p's start in clock ticks (10 ms) since boot.
func (nd *Node) startTicks(p *Proc) uint64 {
	return uint64((uptime + p.started()) / (10 * time.Millisecond))
}

// Info returns a running scripted process's identity.
func (nd *Node) Info(pid uint32) (procfs.Info, error) {
	p, ok := nd.find(pid)
	if !ok {
		return procfs.Info{}, fmt.Errorf("%w: pid %d", procfs.ErrGone, pid)
	}
	return procfs.Info{StartTime: nd.startTicks(p), Name: p.Name, ContainerID: p.Container, PodUID: p.Pod}, nil
}

func (nd *Node) find(pid uint32) (*Proc, bool) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	for _, k := range nd.live {
		if p := &nd.procs[k]; p.Pid == pid && p.active(nd.last) {
			return p, true
		}
	}
	return nil, false
}
