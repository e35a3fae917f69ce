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
}

// DefaultPhysics are -simulate's physics: a 70 W idle, 3 W per percent
// of SM, samples every 1/6 s visible at once, a counter that steps every
// 100 ms, on a 10 ms grid (a finer one costs the simulator, not the
// agent, more CPU).
var DefaultPhysics = Physics{IdleWatts: 70, SMWatts: 3, SamplePeriod: time.Second / 6, CounterPeriod: 100 * time.Millisecond, Tick: 10 * time.Millisecond}

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
}

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

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type boardState struct {
	mig      bool
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
	}
	nd := &Node{cfg: cfg, ph: ph, now: cfg.Now, start: cfg.Now(), procs: cfg.Procs,
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x5151)), cursors: make([]nvmlsource.SampleCursor, n)}
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
		nd.boards = append(nd.boards, boardState{phase: phase,
			nextStep: phase + ph.CounterPeriod, nextSmp: phase + ph.SamplePeriod, spanFrom: phase})
	}
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
	for b := range nd.boards {
		bs := &nd.boards[b]
		p := nd.ph.IdleWatts
		if nd.ph.NoiseWatts > 0 {
			p += nd.rng.NormFloat64() * nd.ph.NoiseWatts
		}
		bs.idleMJ += nd.ph.IdleWatts * dt * 1000
		bs.accMJ += p * dt * 1000
	}
	for nd.next < len(nd.procs) && nd.procs[nd.next].From < t {
		nd.live = append(nd.live, nd.next)
		nd.next++
	}
	for b := range nd.boards {
		nd.boards[b].sumSM, nd.boards[b].sumW = 0, 0
	}
	for _, k := range nd.live {
		pr := &nd.procs[k]
		if !pr.active(t - tk) {
			continue
		}
		l := pr.level(t - tk)
		bs := &nd.boards[pr.Board]
		bs.sumSM += l.SM
		bs.sumW += nd.draw(pr, l)
	}
	for _, k := range nd.live {
		pr := &nd.procs[k]
		if !pr.active(t - tk) {
			continue
		}
		l := pr.level(t - tk)
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

// ReadEnergy reads board i's counter.
func (nd *Node) ReadEnergy(i int) (uint64, error) {
	if i < 0 || i >= len(nd.boards) {
		return 0, fmt.Errorf("%w: board %d", otelenergy.ErrRead, i)
	}
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

// Read lists board i's processes at the last Step as a
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

// Procs returns the script.
func (nd *Node) Procs() []Proc { return nd.procs }

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
	return procfs.Info{StartTime: uint64(pid), Name: p.Name, ContainerID: p.Container, PodUID: p.Pod}, nil
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
