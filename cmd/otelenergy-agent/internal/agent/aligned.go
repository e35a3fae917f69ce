package agent

import (
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/attrib"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
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
// scale and the wall clock at once: the Monitor's, from [NewMonitor].
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
func (a *Agent) splitAligned(b *board, ivs []procshare.Interval) {
	ringNow, wall := a.clock()
	wallNow := wall.UnixNano()
	off := wallNow - ringNow // the wall clock less the ring's, now
	if b.wallOff == 0 {
		b.wallOff = off
	}
	a.remember(b)
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
		unaligned := t1 < ringNow-maxSkew || t1 > ringNow+maxFuture
		key := keyOf(b.procs[s.Pid])
		if !unaligned {
			key = a.keyAt(b, s.Pid, ts)
		}
		b.smp = append(b.smp, attrib.Sample{Pid: s.Pid, Key: key, T1: t1, SM: s.SmUtil, Mem: s.MemUtil, Enc: s.EncUtil, Dec: s.DecUtil,
			// A stamp more than a minute off, or still in the future, is
			// on some other clock.
			Unaligned: unaligned})
	}
	b.wallOff = off
	if len(b.listing.Samples) == 0 {
		// A Lister that sums each process's samples and keeps none.
		for _, p := range b.listing.Processes {
			if p.Samples > 0 {
				b.smp = append(b.smp, attrib.Sample{Pid: p.Pid, Key: keyOf(b.procs[p.Pid]), SM: uint32(min(p.SmUtil, 1<<31)), Unaligned: true})
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

// Keys of held samples (attrib.Sample.Key): which process, of those that
// held a pid, a sample's energy goes to.
const (
	keyUnknown  uint64 = 0       // none identified: unattributed
	keyGone     uint64 = 1 << 62 // one whose series has ended: exited
	keyOverflow uint64 = 1 << 63 // one beyond the cap: overflow
)

// keyOf returns the key of series s: its start time plus one, as no
// start time reaches 2^62 ticks.
func keyOf(s *series) uint64 {
	switch {
	case s == nil:
		return keyUnknown
	case s.overflow:
		return keyOverflow
	}
	return s.start + 1
}

// keyAt returns the key of the process that held pid on b when its
// sample was stamped, at wall time ts (Unix ns): the pid's current
// process unless that started after ts (a pid reused since), then the
// newest exiting one on the pid that started by ts, else keyGone; with
// no current process, an exiting one, else keyGone when the pid's latest
// known process had started by ts, else keyUnknown.
func (a *Agent) keyAt(b *board, pid uint32, ts int64) uint64 {
	s := b.procs[pid]
	if s == nil || a.startedBy(s.start, ts) {
		if s == nil {
			for _, e := range b.exiting {
				if e.pid == pid && a.startedBy(e.start, ts) {
					return keyOf(e)
				}
			}
			if k, ok := b.known[pid]; ok && a.startedBy(k.start, ts) {
				return keyGone // its series has ended already
			}
		}
		return keyOf(s)
	}
	var best *series
	for _, e := range b.exiting {
		if e.pid == pid && a.startedBy(e.start, ts) && (best == nil || e.start > best.start) {
			best = e
		}
	}
	if best == nil {
		return keyGone
	}
	return keyOf(best)
}

// knownProc is a pid's latest process with a series of its own.
type knownProc struct {
	start uint64
	gen   uint64 // the pass that last saw its series
}

// forgetKnown is how many passes a pid's process is remembered after its
// series was last seen: longer than any sample is late.
const forgetKnown = 30

// remember notes each pid's process with a series, and forgets those
// gone for forgetKnown passes.
func (a *Agent) remember(b *board) {
	if b.known == nil {
		b.known = make(map[uint32]knownProc)
	}
	for pid, s := range b.procs {
		if !s.overflow {
			b.known[pid] = knownProc{start: s.start, gen: a.gen}
		}
	}
	for pid, k := range b.known {
		if k.gen+forgetKnown < a.gen {
			delete(b.known, pid)
		}
	}
}

// startedBy reports whether a process that started start ticks after
// boot had started before wall time ts (Unix ns): a sample stamped at
// the tick a process started describes the time before, its
// predecessor's.
func (a *Agent) startedBy(start uint64, ts int64) bool {
	return a.boot.UnixNano()+int64(start)*int64(time.Second/ticksPerSecond) < ts
}

// give adds a split's shares to board b's series: each to the process
// its samples' key names, to the exited series when that process's
// series has ended since (its energy was held past its last export),
// and to unattributed when no process was identified.
func (a *Agent) give(b *board, r *attrib.Result) {
	b.idleMJ += r.IdleMJ
	b.unattributedMJ += r.UnattributedMJ
	for k, pid := range r.Pids {
		if s := b.seriesFor(pid, r.Keys[k]); s != nil {
			s.mj += r.MJ[k]
		} else {
			b.unattributedMJ += r.MJ[k]
		}
	}
}

// seriesFor returns the series that the energy of sample key key on pid
// goes to, nil for unattributed; see give.
func (b *board) seriesFor(pid uint32, key uint64) *series {
	switch key {
	case keyUnknown:
		return nil
	case keyOverflow:
		return &b.overflow
	case keyGone:
		return &b.exited
	}
	if s, ok := b.procs[pid]; ok && !s.overflow && s.start+1 == key {
		return s
	}
	for _, s := range b.exiting {
		if s.pid == pid && s.start+1 == key {
			return s
		}
	}
	return &b.exited
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
