package procshare

import (
	"math"

	"github.com/otelenergy/otelenergy/internal/split"
	"github.com/otelenergy/otelenergy/ring"
)

// Interval is one counter interval of a board: the span between two
// consecutive steps of its energy counter, and the energy between them,
// as the ring's cursor yields it.
type Interval = ring.Interval

// Mode says what a board's utilization data can tell about a window.
type Mode uint8

const (
	// Measured: per-process SM utilization is available. Weights are
	// each listed process's SM utilization summed over the window's
	// samples; all zero when NVML reported no sample (NOT_FOUND).
	Measured Mode = iota
	// Unmeasured: the processes are listed but the board gives no
	// per-process utilization (MIG, vGPU, NOT_SUPPORTED). Weights, when
	// any is positive, are what the board tells instead (under MIG, each
	// instance's compute slices or GPM activity); all zero splits evenly.
	Unmeasured
	// Unknown: the listing failed; nothing is known of who used the
	// board.
	Unknown
)

// Result is how a window's energy was divided, besides the per-process
// shares that [Window] adds to its out slice.
type Result struct {
	// IdleMJ is the static part of the window's intervals.
	IdleMJ uint64
	// UnattributedMJ is active energy that no listed process could be
	// given: no process, no utilization, or a failed listing.
	UnattributedMJ uint64
	// ActiveMJ is the energy above the static part, attributed or not.
	ActiveMJ uint64
	// Shared is true when the processes' shares are splits of an
	// [Unmeasured] board: by its instances' weights or even, not by
	// each process's own use.
	Shared bool
}

// StaticMJ returns the static part of one interval at staticW watts:
// min(E, floor(staticW·Δt)). A static power that is negative, NaN or
// infinite counts as zero.
func StaticMJ(iv Interval, staticW float64) uint64 {
	if !(staticW > 0) || math.IsInf(staticW, 0) || iv.T1 <= iv.T0 {
		return 0
	}
	// W × ns / 1e6 = mJ.
	s := staticW * float64(iv.T1-iv.T0) / 1e6
	if s >= float64(iv.EnergyMJ) {
		return iv.EnergyMJ
	}
	return uint64(s) // floor: s is non-negative and below EnergyMJ
}

// Window divides the energy of one window's intervals at static power
// staticW. weights[i] is listed process i's weight (see [Mode]); its
// share is added to out[i]. out must be at least as long as weights;
// Window panics otherwise, as a slice index out of range. The package doc
// states the rule and its guarantees.
func Window(ivs []Interval, staticW float64, mode Mode, weights, out []uint64) Result {
	_ = out[:len(weights)]
	var r Result
	for _, iv := range ivs {
		s := StaticMJ(iv, staticW)
		r.IdleMJ += s
		r.ActiveMJ += iv.EnergyMJ - s
	}
	switch {
	case r.ActiveMJ == 0 || len(weights) == 0 || mode == Unknown:
		r.UnattributedMJ = r.ActiveMJ
	case mode == Unmeasured:
		r.Shared = true
		if _, ok := split.Among(r.ActiveMJ, weights, 0, out); !ok {
			split.Evenly(r.ActiveMJ, out[:len(weights)])
		}
	default:
		if _, ok := split.Among(r.ActiveMJ, weights, 0, out); !ok {
			r.UnattributedMJ = r.ActiveMJ
		}
	}
	return r
}

// Cover sets cover[k] to part k's device time of an interval of dt ns:
// the time is shared equally among the parts with a positive share of its
// energy (the remainder one ns each to the first of them, [split.Evenly]),
// none to the others, so that Σ cover = dt whenever one has a share, and
// the time is no part's when none has. It is what the agent charges
// embodied emissions by. cover must be as long as shares; even is
// scratch, returned grown.
func Cover(dt uint64, shares, cover, even []uint64) []uint64 {
	active := 0
	for _, s := range shares {
		if s > 0 {
			active++
		}
	}
	if cap(even) < active {
		even = make([]uint64, active, 2*active)
	}
	even = even[:active]
	clear(even)
	split.Evenly(dt, even)
	j := 0
	for k, s := range shares {
		cover[k] = 0
		if s > 0 {
			cover[k] = even[j]
			j++
		}
	}
	return even
}
