package amdsmi

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/internal/source"
)

// unknownShare is the share of a board whose processes are not known: it
// is charged whole and its requests are marked shared and approximate.
var unknownShare = source.Share{Processes: -1, Shared: true}

func (s *Source) startSharing(c config) {
	s.pids = map[uint32]bool{}
	for _, p := range c.pids {
		s.pids[uint32(p)] = true
	}
	s.shares = make([]atomicShare, len(s.devices))
	s.prevGfx = make([]map[uint32]uint64, len(s.devices))
	s.refreshShares()
	if c.shareInterval <= 0 {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	s.stop, s.done = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(c.shareInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				s.refreshShares()
			}
		}
	}()
}

// stopSharing stops the listing goroutine and waits for it; only the
// first call does anything. It takes no lock the listing holds, so a
// listing in progress finishes first.
func (s *Source) stopSharing() {
	s.stopOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
	})
}

// Share returns board i's latest share; it never calls the library.
func (s *Source) Share(i int) source.Share {
	if i < 0 || i >= len(s.shares) {
		return unknownShare
	}
	if p := s.shares[i].Load(); p != nil {
		return *p
	}
	return unknownShare
}

// refreshShares lists the processes on every board and recomputes its
// share, by the rules of the package doc.
func (s *Source) refreshShares() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return
	}
	for i, h := range s.handles {
		if s.lost[i].Load() {
			continue
		}
		var st Status
		s.procBuf, st = s.lib.Processes(h, s.procBuf)
		if st != StatusSuccess {
			if st != StatusNotSupported {
				otel.Handle(fmt.Errorf("amdsmi: listing the processes of %s: %w", s.devices[i].ID, st))
			}
			s.shares[i].Store(&unknownShare)
			s.prevGfx[i] = nil
			continue
		}
		sh, next := split(s.procBuf, s.prevGfx[i], s.pids)
		s.prevGfx[i] = next
		s.shares[i].Store(&sh)
	}
}

// split computes a board's share from one listing and the previous
// listing's gfx times: the attributed processes' part of the graphics
// engine time used since, as Kepler splits by SM utilization. It returns
// the gfx times to keep for the next listing.
//
//   - No process, or only attributed ones: exclusive, Fraction 1.
//   - None attributed: Shared, not Split (a confident zero is more often
//     a wrong pid than a board doing no work for them).
//   - Both, with gfx time used since the previous listing: Fraction by
//     that time; none used: evenly by count. Shared and Split.
//   - Both, on the first listing (no previous times): Shared, not Split.
func split(procs []Process, prev map[uint32]uint64, ours map[uint32]bool) (source.Share, map[uint32]uint64) {
	next := make(map[uint32]uint64, len(procs))
	var mine, others int
	var dMine, dAll uint64
	for _, p := range procs {
		if _, dup := next[p.Pid]; dup {
			continue
		}
		next[p.Pid] = p.GfxNs
		var d uint64
		if was, ok := prev[p.Pid]; ok && p.GfxNs >= was {
			d = p.GfxNs - was
		}
		dAll += d
		if ours[p.Pid] {
			mine++
			dMine += d
		} else {
			others++
		}
	}
	n := mine + others
	switch {
	case others == 0:
		return source.Share{Processes: n, Split: true, Fraction: 1}, next
	case mine == 0, prev == nil:
		return source.Share{Processes: n, Shared: true}, next
	case dAll == 0:
		return source.Share{Processes: n, Shared: true, Split: true, Fraction: float64(mine) / float64(n)}, next
	default:
		return source.Share{Processes: n, Shared: true, Split: true, Fraction: float64(dMine) / float64(dAll)}, next
	}
}
