package agent

import (
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

// now returns the agent's clock on the Rings' time scale.
func (a *Agent) now() int64 { return a.cfg.Now().UnixNano() - a.epoch }

// splitAligned hands board b's new intervals and the listing's samples to
// its aligner and gives out what it splits.
func (a *Agent) splitAligned(b *board, ivs []split.Interval) {
	now := a.now() // only to tell whether the samples are on the agent's clock
	b.att.SetPrior(a.peerIdle(b))
	b.att.Listed(b.listed)
	b.att.Push(ivs)
	b.smp = b.smp[:0]
	aligned := true
	for _, s := range b.listing.Samples {
		t1 := int64(s.TimeStamp)*1000 - a.epoch
		if t1 < now-maxSkew || t1 > now+maxSkew {
			aligned = false
		}
		b.smp = append(b.smp, attrib.Sample{Pid: s.Pid, T1: t1, SM: s.SmUtil, Mem: s.MemUtil, Enc: s.EncUtil, Dec: s.DecUtil})
	}
	if len(b.listing.Samples) == 0 {
		// A Lister that sums each process's samples and keeps none.
		for _, p := range b.listing.Processes {
			if p.Samples > 0 {
				b.smp = append(b.smp, attrib.Sample{Pid: p.Pid, SM: uint32(min(p.SmUtil, 1<<31))})
				aligned = false
			}
		}
	}
	if !aligned {
		if len(ivs) == 0 {
			b.smp = b.smp[:0]
		}
		for k := range b.smp {
			b.smp[k].T0, b.smp[k].T1 = ivs[0].T0, ivs[len(ivs)-1].T1
			b.smp[k].Unaligned = true
		}
	}
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
