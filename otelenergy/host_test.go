package otelenergy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/simgpu"
)

// fakeHost is a host with a CPU package and its DRAM whose counters, and
// the attributed tree's and the node's CPU times, the test sets.
type fakeHost struct {
	mu                sync.Mutex
	cpuMJ, memMJ      uint64
	tree, node        uint64
	failCPU, failRead bool
}

var hostDevices = []Device{
	{ID: "intel-rapl:0", Name: "package-0", Vendor: "test", Type: "cpu", MaxWatts: 1e6},
	{ID: "intel-rapl:0:0", Name: "dram package-0", Vendor: "test", Type: "memory", MaxWatts: 1e6},
}

func (h *fakeHost) source(t testing.TB) Source {
	t.Helper()
	src, err := NewFuncSource(hostDevices, func(i int) (uint64, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.failRead {
			return 0, ErrRead
		}
		return []uint64{h.cpuMJ, h.memMJ}[i], nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func (h *fakeHost) times() (uint64, uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failCPU {
		return 0, 0, errors.New("no /proc")
	}
	return h.tree, h.node, nil
}

// window is what the host did over one host interval.
func (h *fakeHost) window(cpu, mem, tree, node uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cpuMJ += cpu
	h.memMJ += mem
	h.tree += tree
	h.node += node
}

// withFakeHost meters h's host, read every step, with h's CPU times.
func withFakeHost(t testing.TB, h *fakeHost) Option {
	src := h.source(t)
	return optionFunc(func(c *config) {
		c.host = &hostConfig{src: src, cpu: h.times, every: step}
	})
}

// hostWindow is one host interval of a scenario, in ms since the first
// sample: the host's CPU and DRAM energy in it, and the tree's and the
// node's CPU ticks.
type hostWindow struct {
	a, b                       int64
	cpu, mem, tree, node       uint64
	failCPU, failRead, skipped bool
}

// refHostShares is the ground truth, computed apart from the code under
// test: over every millisecond of every window, the tree's share of the
// host's energy (energy × tree ticks ÷ node ticks, spread evenly over
// the window) goes equally to the requests active in that millisecond.
// Windows whose reads failed are merged into the next good one.
func refHostShares(ws []hostWindow, spans [][2]int64) (cpu, mem []float64, unCPU, unMem float64) {
	cpu, mem = make([]float64, len(spans)), make([]float64, len(spans))
	var pend hostWindow
	pending := false
	for _, w := range ws {
		if w.failCPU || w.failRead {
			if !pending {
				pend, pending = w, true
			} else {
				pend.b, pend.cpu, pend.mem, pend.tree, pend.node = w.b, pend.cpu+w.cpu, pend.mem+w.mem, pend.tree+w.tree, pend.node+w.node
			}
			continue
		}
		if pending {
			w = hostWindow{a: pend.a, b: w.b, cpu: pend.cpu + w.cpu, mem: pend.mem + w.mem, tree: pend.tree + w.tree, node: pend.node + w.node}
			pending = false
		}
		share := float64(w.tree) / float64(w.node)
		perMS := [2]float64{float64(w.cpu) * share / float64(w.b-w.a), float64(w.mem) * share / float64(w.b-w.a)}
		for x := w.a; x < w.b; x++ {
			n := 0
			for _, s := range spans {
				if s[0] <= x && x < s[1] {
					n++
				}
			}
			if n == 0 {
				unCPU += perMS[0]
				unMem += perMS[1]
				continue
			}
			for i, s := range spans {
				if s[0] <= x && x < s[1] {
					cpu[i] += perMS[0] / float64(n)
					mem[i] += perMS[1] / float64(n)
				}
			}
		}
	}
	return cpu, mem, unCPU, unMem
}

// TestHostShareExact: each request's CPU and DRAM share is exactly the
// ground truth, the host's energy is conserved exactly (requests +
// unattributed + other processes), energy.millijoules is what it is
// without a host, and a failed read of the CPU times or of the counters
// loses nothing.
func TestHostShareExact(t *testing.T) {
	// Requests in ms: A on [0, 250), B on [150, 300), C on [650, 700).
	spans := [][2]int64{{0, 250}, {150, 300}, {650, 700}}
	ws := []hostWindow{
		{a: 0, b: 100, cpu: 4000, mem: 1000, tree: 30, node: 60},
		{a: 100, b: 200, cpu: 6000, mem: 1200, tree: 20, node: 80},
		{a: 200, b: 300, cpu: 3000, mem: 600, tree: 50, node: 50},
		{a: 300, b: 400, cpu: 1000, mem: 100, tree: 10, node: 40},
		// The CPU times cannot be read, then the counters: the window
		// from 400 to 700 is split whole at 700, with its CPU share.
		{a: 400, b: 500, cpu: 2000, mem: 200, tree: 10, node: 100, failCPU: true},
		{a: 500, b: 600, cpu: 3000, mem: 300, tree: 10, node: 100, failRead: true},
		{a: 600, b: 700, cpu: 1000, mem: 700, tree: 40, node: 100},
		{a: 700, b: 800, cpu: 800, mem: 80, tree: 0, node: 100},
	}
	run := func(host bool) (res []Result, h *fakeHost, r *testRig) {
		h = &fakeHost{}
		var opts []Option
		if host {
			opts = append(opts, withFakeHost(t, h))
		}
		r = newRig(t, ideal(simgpu.Config{}), opts...)
		r.m.Sample()
		reqs := make([]*Request, len(spans))
		ms := int64(0)
		for _, w := range ws {
			// Walk the window's milliseconds in steps of 50, starting and
			// ending requests on the way, then close the window.
			for ; ms < w.b; ms += 50 {
				for i, s := range spans {
					if s[0] == ms {
						reqs[i] = r.m.StartRequest(context.Background())
						r.m.AddTokens(reqs[i], 3)
					}
					if s[1] == ms {
						reqs[i].End()
					}
				}
				if ms+50 < w.b {
					r.clock.Advance(50 * time.Millisecond)
				}
			}
			h.window(w.cpu, w.mem, w.tree, w.node)
			h.mu.Lock()
			h.failCPU, h.failRead = w.failCPU, w.failRead
			h.mu.Unlock()
			r.tick(50 * time.Millisecond)
		}
		h.mu.Lock()
		h.failCPU, h.failRead = false, false
		h.mu.Unlock()
		r.settle(t)
		for _, q := range reqs {
			res = append(res, q.WaitFinal(context.Background()))
		}
		return res, h, r
	}
	off, _, _ := run(false)
	on, h, r := run(true)
	cpu, mem, unCPU, unMem := refHostShares(ws, spans)
	for i := range spans {
		if off[i].HasCPU || off[i].HasMemory || off[i].CPUMJ != 0 {
			t.Errorf("request %d without a host has host shares: %+v", i, off[i])
		}
		if on[i].Approximate != off[i].Approximate || on[i].EnergyMJ != off[i].EnergyMJ || !on[i].HasEnergy {
			t.Errorf("request %d: accelerator figure %d (approximate %v) with a host, %d (%v) without",
				i, on[i].EnergyMJ, on[i].Approximate, off[i].EnergyMJ, off[i].Approximate)
		}
		if !on[i].HasCPU || !on[i].HasMemory {
			t.Fatalf("request %d: HasCPU %v HasMemory %v", i, on[i].HasCPU, on[i].HasMemory)
		}
		// The scenario's shares are whole millijoules: the figures must
		// be them exactly (the reference sums floats, hence the 1e-6).
		if !near(float64(on[i].CPUMJ), cpu[i]) || !near(float64(on[i].MemoryMJ), mem[i]) {
			t.Errorf("request %d: cpu %d mJ, memory %d mJ; want %.3f, %.3f", i, on[i].CPUMJ, on[i].MemoryMJ, cpu[i], mem[i])
		}
	}
	// Conservation, exact, per device: what the requests got, what went
	// to no request, and other processes' part add up to the metered
	// energy.
	for i, d := range r.m.host.devs {
		var got uint64
		for _, res := range on {
			got += []uint64{res.CPUMJ, res.MemoryMJ}[i]
		}
		split, un := r.m.ledger.TimeSplit(i)
		metered := []uint64{h.cpuMJ, h.memMJ}[i]
		if got+un != split || split+d.other.Load() != metered || d.acc.Total() != metered {
			t.Errorf("%s: requests %d + unattributed %d = %d, split %d; + other %d, metered %d (hw.energy %d)",
				d.ID, got, un, got+un, split, d.other.Load(), metered, d.acc.Total())
		}
		if want := []float64{unCPU, unMem}[i]; !near(float64(un), want) {
			t.Errorf("%s: unattributed %d mJ, want %.3f", d.ID, un, want)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

// TestHostShareSpans: through the middleware and the span exporter, a
// request span carries its final host shares, the request-energy
// histogram carries them with hw.type, and hw.energy and the other
// processes' share are exported per host device; without a host, none
// of them is there.
func TestHostShareSpans(t *testing.T) {
	for _, host := range []bool{false, true} {
		h := &fakeHost{}
		exp := tracetest.NewInMemoryExporter()
		rd, mp := newReader()
		opts := []Option{WithMeterProvider(mp)}
		if host {
			opts = append(opts, withFakeHost(t, h))
		}
		r := newRig(t, ideal(simgpu.Config{}), opts...)
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(NewSpanExporter(exp, r.m))))
		r.m.Sample()
		ctx, span := tp.Tracer("t").Start(context.Background(), "req")
		req := r.m.StartRequest(ctx)
		r.m.AddTokens(req, 5)
		h.window(9000, 900, 1, 3) // the tree used a third of the node
		r.tick(step)
		r.m.finish(req)
		h.window(6000, 600, 2, 4) // half of it, with nobody active
		r.tick(step)
		r.settle(t)
		span.End() // the exporter replaces the estimate with the final figure
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("host %v: %d spans", host, len(spans))
		}
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range spans[0].Attributes {
			attrs[kv.Key] = kv.Value
		}
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		rm := collect(t, rd)
		hist := requestEnergyByType(t, rm)
		energy := floatPoints(t, rm, "hw.energy", semconv.HwIDKey)
		other := floatPoints(t, rm, "otelenergy.energy.other_processes", semconv.HwIDKey)
		if !host {
			if _, ok := attrs[cpuMillijoulesKey]; ok {
				t.Error("energy.cpu.millijoules without a host")
			}
			if _, ok := attrs[memoryMillijoulesKey]; ok {
				t.Error("energy.memory.millijoules without a host")
			}
			if len(hist) != 1 || len(energy) != 1 {
				t.Errorf("without a host: request energy series %v, hw.energy %v", hist, energy)
			}
			continue
		}
		// The request covered the first window alone: a third of it.
		if v, ok := attrs[cpuMillijoulesKey]; !ok || v.AsInt64() != 3000 {
			t.Errorf("energy.cpu.millijoules = %v, want 3000", v.Emit())
		}
		if v, ok := attrs[memoryMillijoulesKey]; !ok || v.AsInt64() != 300 {
			t.Errorf("energy.memory.millijoules = %v, want 300", v.Emit())
		}
		if _, ok := attrs[EnergyMillijoulesKey]; !ok {
			t.Error("energy.millijoules missing")
		}
		if hist["cpu"] != 3 || hist["memory"] != 0.3 || len(hist) != 3 {
			t.Errorf("request energy by hw.type %v, want cpu 3 J and memory 0.3 J beside the accelerator's", hist)
		}
		if energy["intel-rapl:0"] != 15 || energy["intel-rapl:0:0"] != 1.5 {
			t.Errorf("hw.energy %v", energy)
		}
		if other["intel-rapl:0"] != 9 || other["intel-rapl:0:0"] != 0.9 {
			t.Errorf("other processes %v, want 6+3 J of the package and a tenth of it of the DRAM", other)
		}
	}
}

// requestEnergyByType sums otelenergy.request.energy by hw.type ("" for
// the accelerator's series).
func requestEnergyByType(t testing.TB, rm metricdata.ResourceMetrics) map[string]float64 {
	t.Helper()
	m, ok := findMetric(rm, "otelenergy.request.energy")
	if !ok {
		return nil
	}
	out := map[string]float64{}
	for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		v, _ := p.Attributes.Value(semconv.HwTypeKey)
		out[v.Emit()] += p.Sum
	}
	return out
}

// TestWithHostSourceInvalid: a psys device, a nil source and a bad pid
// are refused.
func TestWithHostSourceInvalid(t *testing.T) {
	gpu := func() Source {
		s, err := NewFuncSource([]Device{{ID: "g"}}, func(int) (uint64, error) { return 0, nil }, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	psys, err := NewFuncSource([]Device{{ID: "intel-rapl:1", Name: "psys", Type: "host"}}, func(int) (uint64, error) { return 0, nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	cpu := (&fakeHost{}).source(t)
	for name, opt := range map[string]Option{
		"psys":    WithHostSource(psys),
		"nil":     WithHostSource(nil),
		"bad pid": WithHostSource(cpu, 0),
	} {
		if _, err := NewMonitor(gpu(), opt); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: NewMonitor = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestHostShareConcurrentSafe: requests start, report and end on many
// goroutines while the real sampler meters the GPU and the host and reads
// this process's CPU time from /proc; after Shutdown every millijoule of
// each host device is a request's, unattributed or other processes',
// exactly. Run it under -race.
func TestHostShareConcurrentSafe(t *testing.T) {
	var cpuMJ, memMJ atomic.Uint64
	host, err := NewFuncSource(hostDevices, func(i int) (uint64, error) {
		return []*atomic.Uint64{&cpuMJ, &memMJ}[i].Add(uint64(7 + i)), nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var gpuMJ atomic.Uint64
	gpu, err := NewFuncSource([]Device{{ID: "g", MaxWatts: 1e6}}, func(int) (uint64, error) { return gpuMJ.Add(5), nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	// CPU times that move at every reading, the tree's half of the
	// node's: every host window has CPU time to split by, however slow
	// the machine, where this process's own /proc tree may not move
	// between two windows of a loaded machine (or the windows, which
	// stretch with the cost of walking /proc, may not come at all).
	var ticks atomic.Uint64
	times := func() (tree, node uint64, err error) {
		n := ticks.Add(2)
		return n / 2, n, nil
	}
	m, err := NewMonitor(gpu, WithMeterProvider(mpNoop()), WithHostSource(host),
		optionFunc(func(c *config) { c.host.every, c.host.cpu = 10*time.Millisecond, times }))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reqs []*Request
	var wg sync.WaitGroup
	// A bounded load: requests from four goroutines while the sampler
	// runs; what is checked below holds however much of it ran.
	deadline := time.Now().Add(time.Second)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; time.Now().Before(deadline); k++ {
				req := m.StartRequest(context.Background())
				m.AddTokens(req, 1)
				if k%3 == 0 {
					time.Sleep(time.Millisecond)
				}
				res := req.End()
				_ = res.CPUMJ + res.MemoryMJ
				mu.Lock()
				reqs = append(reqs, req)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// One request held open across host windows until two have been
	// pushed since it started, then ended: it must get a share once
	// final. Each wait is for the sampler, not for a deadline, so a slow
	// machine only takes longer.
	held := m.StartRequest(context.Background())
	m.AddTokens(held, 1)
	pushed := func() uint64 { return uint64(m.host.devs[0].ring.Written()) }
	for start := pushed(); pushed() < start+2; {
		time.Sleep(time.Millisecond)
	}
	held.End()
	res := held.WaitFinal(context.Background())
	reqs = append(reqs, held)
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res.CPUMJ == 0 || res.MemoryMJ == 0 {
		t.Errorf("a request open across two host windows got cpu %d mJ, memory %d mJ; want a share of each", res.CPUMJ, res.MemoryMJ)
	}
	for i, d := range m.host.devs {
		var got uint64
		for _, q := range reqs {
			got += q.st.host[d.class].Load()
		}
		split, un := m.ledger.TimeSplit(i)
		if got+un != split || split+d.other.Load() != d.pushedTotal {
			t.Errorf("%s: requests %d + unattributed %d != split %d, or + other %d != pushed %d",
				d.ID, got, un, split, d.other.Load(), d.pushedTotal)
		}
	}
}

// TestHostShareFinalIsComplete: a request's figure is final only once the
// host's windows are split past its end, even when the host is read far
// less often than the accelerator steps, so a final figure never grows.
func TestHostShareFinalIsComplete(t *testing.T) {
	h := &fakeHost{}
	src := h.source(t)
	r := newRig(t, ideal(simgpu.Config{}), WithHorizon(300*time.Millisecond),
		optionFunc(func(c *config) { c.host = &hostConfig{src: src, cpu: h.times, every: time.Second} }))
	r.m.Sample()
	req := r.m.StartRequest(context.Background())
	r.m.AddTokens(req, 4)
	h.window(5000, 500, 1, 1) // the tree's, whole, over the next second
	r.tick(2 * step)
	req.End()
	var res Result
	for range 30 {
		r.tick(step)
		if req.st.Final() {
			res = req.WaitFinal(context.Background())
			break
		}
	}
	if !req.st.Final() {
		t.Fatal("not final after 3 s")
	}
	// Active for 200 ms of the 1 s window.
	if res.CPUMJ != 1000 || res.MemoryMJ != 100 {
		t.Errorf("final host shares cpu %d mJ, memory %d mJ; want 1000, 100", res.CPUMJ, res.MemoryMJ)
	}
	r.tick(2 * time.Second)
	if later := req.WaitFinal(context.Background()); later.CPUMJ != res.CPUMJ || later.MemoryMJ != res.MemoryMJ {
		t.Errorf("a final figure grew: %+v after %+v", later, res)
	}
}

// TestHostIntervalStretches: a slow walk of /proc stretches the host
// interval to twenty times its cost, within 250 ms and 2 s.
func TestHostIntervalStretches(t *testing.T) {
	h := &fakeHost{}
	r := newRig(t, ideal(simgpu.Config{}), WithHostSource(h.source(t)))
	hm := r.m.host
	if !hm.adapt || hm.every != int64(defaultHostInterval) {
		t.Fatalf("adapt %v every %v, want true and the default", hm.adapt, time.Duration(hm.every))
	}
	for _, c := range []struct{ walk, want time.Duration }{
		{30 * time.Millisecond, 600 * time.Millisecond},
		{time.Millisecond, defaultHostInterval},
		{200 * time.Millisecond, maxHostInterval},
	} {
		hm.cpu = func() (uint64, uint64, error) {
			time.Sleep(c.walk)
			return h.times()
		}
		r.tick(maxHostInterval)
		if got := time.Duration(hm.every); got < c.want || (c.want != maxHostInterval && got > c.want*2) {
			t.Errorf("a walk of %v: interval %v, want about %v", c.walk, got, c.want)
		}
	}
}
