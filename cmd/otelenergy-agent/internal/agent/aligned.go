package agent

import (
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/attrib"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/split"
)

// maxSkew is how far from the agent's clock a sample's timestamp may lie
// and still be read as a time on it. NVML stamps samples with the CPU's
// wall clock; a sample outside this is on some other clock (a driver or a
// mock that counts from zero, or a Monitor on a clock of its own), and
// the listing's samples are then taken to describe the pass's new
// intervals, as if they had arrived on time.
const maxSkew = 60e9 // ns

// maxFuture is how far past the clock's reading a sample's stamp may lie:
// the driver and the agent read the same clock, but not at once.
const maxFuture = 50e6 // ns

// ringClock is a Rings that reads its own clock on both its ring's
// scale and the wall clock at once: *otelenergy.Monitor.
type ringClock interface {
	Clock() (ring int64, wall time.Time)
}

// ownClock is the clock of Rings without one: Config.Now, its ring scale
// taken to start at Config.Epoch.
func (a *Agent) ownClock() (int64, time.Time) {
	w := a.cfg.Now()
	return w.UnixNano() - a.epoch, w
}

// splitAligned hands board b's new intervals and the listing's samples to
// its aligner and gives out what it splits.
//
// A sample's wall-clock stamp maps to the ring's scale through one
// reading of the clock per pass: ring time now, less how long ago on the
// wall clock it was stamped. A wall-clock step before the stamp then
// shifts nothing, where a fixed offset would shift every later sample;
// a sample stamped before a step back, which would lie in the future,
// takes the previous pass's offset, and one stamped before a step ahead
// is misplaced by the step, once.
func (a *Agent) splitAligned(b *board, ivs []split.Interval) {
	ringNow, wall := a.clock()
	wallNow := wall.UnixNano()
	off := wallNow - ringNow // the wall clock less the ring's, now
	if b.wallOff == 0 {
		b.wallOff = off
	}
	b.att.SetPrior(a.peerIdle(b))
	b.att.Listed(b.listed)
	b.att.Push(ivs)
	b.smp = b.smp[:0]
	for _, s := range b.listing.Samples {
		ts := int64(s.TimeStamp) * 1000
		t1 := ts - off
		if t1 > ringNow+maxFuture && t1 <= ringNow+maxSkew {
			// In the future: stamped before the wall clock stepped back,
			// on the offset of the previous pass.
			t1 = ts - b.wallOff
		}
		b.smp = append(b.smp, attrib.Sample{Pid: s.Pid, T1: t1, SM: s.SmUtil, Mem: s.MemUtil, Enc: s.EncUtil, Dec: s.DecUtil,
			// A stamp more than a minute off, or still in the future, is
			// on some other clock.
			Unaligned: t1 < ringNow-maxSkew || t1 > ringNow+maxFuture})
	}
	b.wallOff = off
	if len(b.listing.Samples) == 0 {
		// A Lister that sums each process's samples and keeps none.
		for _, p := range b.listing.Processes {
			if p.Samples > 0 {
				b.smp = append(b.smp, attrib.Sample{Pid: p.Pid, SM: uint32(min(p.SmUtil, 1<<31)), Unaligned: true})
			}
		}
	}
	// Samples not on the clock describe the pass's new intervals, as if
	// they had arrived on time; with none, they describe nothing.
	k := 0
	for _, s := range b.smp {
		if s.Unaligned {
			if len(ivs) == 0 {
				continue
			}
			s.T0, s.T1 = ivs[0].T0, ivs[len(ivs)-1].T1
		}
		b.smp[k] = s
		k++
	}
	b.smp = b.smp[:k]
	b.att.AddSamples(b.smp)
	// The hold is timed by the ring: its newest step is within about a
	// counter period of now on its own scale, whichever clock the
	// Monitor runs on.
	b.att.Split(b.lastT, false, &b.res)
	a.give(b, &b.res)
}

// give adds a split's shares to board b's series; a pid with no series is
// unattributed.
func (a *Agent) give(b *board, r *attrib.Result) {
	b.idleMJ += r.IdleMJ
	b.unattributedMJ += r.UnattributedMJ
	for k, pid := range r.Pids {
		if s := b.seriesOf(pid); s != nil {
			s.mj += r.MJ[k]
		} else {
			b.unattributedMJ += r.MJ[k]
		}
	}
}

// seriesOf returns the series pid's energy goes to on b: its own, live
// or exiting, or the overflow series for a process beyond the cap; nil
// when pid has none.
func (b *board) seriesOf(pid uint32) *series {
	if s, ok := b.procs[pid]; ok {
		return s.target(b)
	}
	for _, s := range b.exiting {
		if s.pid == pid {
			return s
		}
	}
	return nil
}

// splitE returns the board's energy up to its newest split interval: the
// counter as read, less what is held for samples.
func (b *board) splitE() uint64 { return b.lastE - b.att.PendingMJ() }

// idleWatts returns the board's static power as used now.
func (b *board) idleWatts() float64 {
	if b.shared {
		return b.static.Watts()
	}
	return b.att.IdleWatts()
}

// peerIdle returns the mean idle power that the boards of b's model
// measured on their own idle intervals, or 0 when none has: a board that
// has never been idle borrows its siblings' idle power until it has
// learned its own.
func (a *Agent) peerIdle(b *board) float64 {
	var sum float64
	n := 0
	for _, o := range a.boards {
		if o == b || o.dev.Name != b.dev.Name {
			continue
		}
		if w, ok := o.att.OwnIdle(); ok {
			sum += w
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
