package amdsmi

import (
	"fmt"
	"slices"

	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/internal/periodic"
	"github.com/otelenergy/otelenergy/internal/source"
)

// unknownShare returns a new pointer to [source.UnknownShare], for the
// atomic shares.
func unknownShare() *source.Share {
	u := source.UnknownShare()
	return &u
}

func (s *Source) startSharing(c config) {
	for _, p := range c.pids {
		s.pids = append(s.pids, uint32(p))
	}
	host := c.hostPIDs()
	s.walkable = host
	s.comparable = c.explicitPIDs || host
	s.tree.Root = c.procRoot
	s.shares = make([]atomicShare, len(s.devices))
	s.prevGfx = make([]map[uint32]uint64, len(s.devices))
	s.refreshShares()
	s.listing = periodic.Start(c.shareInterval, s.refreshShares)
}

// stopSharing stops the listing goroutine and waits for it. It takes no
// lock the listing holds, so a listing in progress finishes first.
func (s *Source) stopSharing() { s.listing.Stop() }

// Share returns board i's latest share; it never calls the library.
func (s *Source) Share(i int) source.Share {
	if i < 0 || i >= len(s.shares) {
		return *unknownShare()
	}
	if p := s.shares[i].Load(); p != nil {
		return *p
	}
	return *unknownShare()
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
			s.shares[i].Store(unknownShare())
			s.prevGfx[i] = nil
			continue
		}
		sh, next := split(s.procBuf, s.prevGfx[i], s.isOurs, s.comparable)
		s.prevGfx[i] = next
		s.shares[i].Store(&sh)
	}
}

// isOurs reports whether pid is attributed or, where this process sees
// the host's pids, descends from an attributed pid (package proctree).
// Listing-only.
func (s *Source) isOurs(pid uint32) bool {
	if !s.walkable {
		return slices.Contains(s.pids, pid)
	}
	return s.tree.Descends(pid, s.pids)
}

// split computes a board's share from one listing and the previous
// listing's gfx times, by the one rule of every GPU source
// ([source.ShareOf]): the attributed processes' part of the graphics
// engine time used since, as Kepler splits by SM utilization; the first
// listing (no previous times) measures nothing. It returns the gfx times
// to keep for the next listing. comparable is false when the attributed
// pids are in another PID namespace than AMD SMI's (this process's own
// pid inside a container).
func split(procs []Process, prev map[uint32]uint64, ours func(uint32) bool, comparable bool) (source.Share, map[uint32]uint64) {
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
		if comparable && ours(p.Pid) {
			mine++
			dMine += d
		} else {
			others++
		}
	}
	return source.ShareOf(source.Listing{Processes: mine + others, Mine: mine, Comparable: comparable,
		Measured: prev != nil, UsedAll: dAll, UsedMine: dMine}), next
}

// ListProcesses lists Devices()[i]'s processes, each with its cumulative
// graphics-engine time, into buf[:0], which it returns grown: for a
// consumer of its own (the node agent's split), apart from the shares'
// listing. It fails with an error wrapping [source.ErrRead] for an index
// out of range or a failed listing ([StatusNotSupported] among them),
// [source.ErrDeviceLost] for a lost board and [source.ErrUnavailable]
// after Close.
func (s *Source) ListProcesses(i int, buf []Process) ([]Process, error) {
	if i < 0 || i >= len(s.devices) {
		return buf[:0], fmt.Errorf("%w: amdsmi: device index %d out of range [0, %d)", source.ErrRead, i, len(s.devices))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return buf[:0], fmt.Errorf("%w: amdsmi source closed", source.ErrUnavailable)
	}
	if s.lost[i].Load() {
		return buf[:0], fmt.Errorf("%w: amdsmi %s", source.ErrDeviceLost, s.devices[i].ID)
	}
	procs, st := s.lib.Processes(s.handles[i], buf)
	if st != StatusSuccess {
		return procs[:0], fmt.Errorf("%w: amdsmi: listing the processes of %s: %w", source.ErrRead, s.devices[i].ID, st)
	}
	return procs, nil
}
