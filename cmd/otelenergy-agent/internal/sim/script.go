package sim

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// DefaultScript is -simulate's script for n boards (see the package doc).
func DefaultScript(n int) []Proc {
	const (
		churnFrom  = 15 * time.Second
		churnEvery = 5 * time.Second
		churnLife  = 2500 * time.Millisecond
		horizon    = 24 * time.Hour
	)
	mig := -1
	if n >= 8 {
		mig = n - 1
	}
	var ps []Proc
	for b := range n {
		rng := rand.New(rand.NewPCG(uint64(b), 0xdefa))
		if b == mig {
			// Notebooks on MIG instances: nothing on the board for its
			// first 16 s, so that its idle power is learned (from 10 s
			// of windows with no process listed), then one that
			// computes 20 s of every minute.
			ps = append(ps, Proc{Board: b, Pid: uint32(2000 + b), Name: "python", From: 16 * time.Second, CPU: 0.5,
				Levels: []Level{{At: 0}, {At: 15 * time.Second, SM: 40, Mem: 25}, {At: 35 * time.Second}}, Period: time.Minute,
				Container: fmt.Sprintf("%064x", 0xc0de0000+b), Pod: fmt.Sprintf("5151a7ed-0000-4000-8000-%012d", b)})
			continue
		}
		// The server starts 6 to 9 s in, as the node's workloads start
		// beside its agent (until then the board lists no process and
		// shows its idle power), loads its model and has no request for
		// 3 or 10 s, then decodes 40 s of every minute.
		from := 6*time.Second + time.Duration(b%4)*time.Second
		gap := 3*time.Second + time.Duration(b*7%14)*time.Second
		lv := []Level{{At: 0}}
		for _, l := range plateau(rng, 40*time.Second, 82, 97, 55, 70) {
			l.At += gap
			lv = append(lv, l)
		}
		lv = append(lv, Level{At: gap + 40*time.Second})
		ps = append(ps, Proc{Board: b, Pid: uint32(2000 + b), Name: "vllm", From: from,
			Levels: lv, Period: time.Minute, CPU: 1,
			Container: fmt.Sprintf("%064x", 0xc0de0000+b), Pod: fmt.Sprintf("5151a7ed-0000-4000-8000-%012d", b)})
		if b%2 == 0 {
			// A trainer joins from 10 s on, compute-bound; its SMs are
			// time-sliced with the server's while both run.
			ps = append(ps, Proc{Board: b, Pid: uint32(3000 + b), Name: "trainer", From: 10 * time.Second, CPU: 4,
				Container: fmt.Sprintf("%064x", 0xd0c0000+b), Levels: plateau(rng, time.Minute, 95, 99, 20, 30), Period: time.Minute})
		}
	}
	for k := range int((horizon - churnFrom) / churnEvery) {
		from := churnFrom + time.Duration(k)*churnEvery
		ps = append(ps, Proc{Board: k % n, Pid: uint32(10000 + k), Name: "job", From: from, Till: from + churnLife, CPU: 0.8,
			Levels: []Level{{SM: 35, Mem: 10}}})
	}
	return ps
}

// plateau draws a busy process's utilization over span: a new level every
// 0.5 to 3 s, SM from smLo to smHi %, memory from memLo to memHi % and at
// most the SM's: the loosely varying plateau of a busy server or trainer.
func plateau(rng *rand.Rand, span time.Duration, smLo, smHi, memLo, memHi float64) []Level {
	var lv []Level
	for at := time.Duration(0); at < span; at += time.Duration(500+rng.IntN(2500)) * time.Millisecond {
		sm := smLo + (smHi-smLo)*rng.Float64()
		mem := min(memLo+(memHi-memLo)*rng.Float64(), sm)
		lv = append(lv, Level{At: at, SM: sm, Mem: mem})
	}
	return lv
}

// Kind is how a scripted process uses the board.
type Kind uint8

const (
	// ComputeBound work keeps the SMs busy and the memory lightly used:
	// its memory utilization is a tenth of its SM utilization.
	ComputeBound Kind = iota
	// MemoryBound work waits on memory: its memory utilization is 90 % of
	// its SM utilization.
	MemoryBound
)

// levels draws a process's utilization over span: a new level every 0.3
// to 3 s, SM around base (±40 %), memory by kind.
func levels(rng *rand.Rand, span time.Duration, base float64, k Kind) []Level {
	var lv []Level
	for at := time.Duration(0); at < span; at += time.Duration(300+rng.IntN(2700)) * time.Millisecond {
		sm := base * (0.6 + 0.8*rng.Float64())
		mem := 0.1 * sm
		if k == MemoryBound {
			mem = 0.9 * sm
		}
		lv = append(lv, Level{At: at, SM: sm, Mem: mem})
	}
	return lv
}

// BusyFrom10s is board b's script of a board idle for its first 10 s,
// then busy until span with a compute-bound job and a memory-bound one,
// whose loads vary.
func BusyFrom10s(b int, span time.Duration, seed uint64) []Proc {
	rng := rand.New(rand.NewPCG(seed, uint64(b)))
	from := 10 * time.Second
	pid := uint32(20000 + 1000*b)
	return []Proc{
		{Board: b, Pid: pid, Name: "trainer", From: from, Till: span, Levels: levels(rng, span-from, 45, ComputeBound)},
		{Board: b, Pid: pid + 1, Name: "decode", From: from + 3*time.Second, Till: span, Levels: levels(rng, span-from, 35, MemoryBound)},
	}
}

// NeverIdle is board b's script of a board busy from the start until
// span: a steady memory-bound server, and a compute-bound job that runs
// 20 s of every 30 s.
func NeverIdle(b int, span time.Duration, seed uint64) []Proc {
	rng := rand.New(rand.NewPCG(seed, uint64(b)))
	pid := uint32(20000 + 1000*b)
	ps := []Proc{{Board: b, Pid: pid, Name: "server", Till: span, Levels: levels(rng, span, 40, MemoryBound)}}
	for k, at := 0, 5*time.Second; at < span; k, at = k+1, at+30*time.Second {
		ps = append(ps, Proc{Board: b, Pid: pid + 1 + uint32(k), Name: "batch", From: at, Till: min(at+20*time.Second, span),
			Levels: levels(rng, 20*time.Second, 40, ComputeBound)})
	}
	return ps
}

// Churn is board b's script of a steady job, busy 40 s of every 60 s,
// and a churn of 2-4 s jobs of either kind with gaps of 0.5 to 4 s
// between them, so that the board is idle now and then.
func Churn(b int, span time.Duration, seed uint64) []Proc {
	rng := rand.New(rand.NewPCG(seed, uint64(b)))
	pid := uint32(20000 + 1000*b)
	var steady []Level
	for c := time.Duration(0); c < span; c += time.Minute {
		for _, l := range levels(rng, 40*time.Second, 30, ComputeBound) {
			l.At += c
			steady = append(steady, l)
		}
		steady = append(steady, Level{At: c + 40*time.Second})
	}
	ps := []Proc{{Board: b, Pid: pid, Name: "steady", Till: span, Levels: steady}}
	k := uint32(1)
	for at := 2 * time.Second; at < span-4*time.Second; k++ {
		life := time.Duration(2000+rng.IntN(2000)) * time.Millisecond
		kind := Kind(rng.IntN(2))
		ps = append(ps, Proc{Board: b, Pid: pid + k, Name: "job", From: at, Till: at + life, Levels: levels(rng, life, 40, kind)})
		at += life + time.Duration(500+rng.IntN(3500))*time.Millisecond
	}
	return ps
}
