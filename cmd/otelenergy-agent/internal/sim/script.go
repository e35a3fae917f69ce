package sim

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// DefaultScript is -simulate's script for n boards (see the package doc).
func DefaultScript(n int) []Proc {
	const (
		churnEvery = 5 * time.Second
		churnLife  = 2500 * time.Millisecond
		horizon    = 24 * time.Hour
	)
	var ps []Proc
	for b := range n {
		// The server is busy 40 s of every 60 s, at a phase of its own.
		sm := float64(30 + 10*(b%4))
		// Busy from 0 while (t + 7 s·b) mod 60 s < 40 s.
		off := time.Duration(b) * 7 * time.Second % time.Minute
		lv := []Level{{At: 0, SM: sm}, {At: 40*time.Second - off}, {At: time.Minute - off, SM: sm}}
		if off > 40*time.Second {
			lv = []Level{{At: 0}, {At: time.Minute - off, SM: sm}, {At: 100*time.Second - off}}
		}
		ps = append(ps, Proc{Board: b, Pid: uint32(2000 + b), Name: "vllm", Levels: lv, Period: time.Minute,
			Container: fmt.Sprintf("%064x", 0xc0de0000+b), Pod: fmt.Sprintf("5151a7ed-0000-4000-8000-%012d", b)})
		if b%2 == 0 {
			ps = append(ps, Proc{Board: b, Pid: uint32(3000 + b), Name: "trainer", From: 10 * time.Second,
				Container: fmt.Sprintf("%064x", 0xd0c0000+b), Levels: []Level{{SM: 25}}})
		}
	}
	for k := range int(horizon / churnEvery) {
		from := time.Duration(k) * churnEvery
		ps = append(ps, Proc{Board: k % n, Pid: uint32(10000 + k), Name: "job", From: from, Till: from + churnLife, Levels: []Level{{SM: 15}}})
	}
	return ps
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
