//go:build cgo && linux

package nvmlsource

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/internal/periodic"
	"github.com/otelenergy/otelenergy/internal/proctree"
	"github.com/otelenergy/otelenergy/internal/source"
)

// unproven is the share of a board that the attributed processes may not
// own alone, and whose energy cannot be split ([source.UnknownShare]):
// the ledger charges it whole and flags the requests shared and
// approximate. It is every board's share before its first listing, so
// that a first listing that fails proves nothing.
func unproven() source.Share { return source.UnknownShare() }

// exclusive is the share of a board that only attributed processes use,
// n of them.
func exclusive(n int) source.Share { return source.Share{Processes: n, Split: true, Fraction: 1} }

// notSplit is the share of a board with n processes that the attributed
// ones may not own alone and whose energy cannot be split.
func notSplit(n int) source.Share { return source.Share{Processes: n, Shared: true} }

// listingStale is how long a board not in MIG mode keeps its last share
// while its listing fails: six refreshes at the default interval. Past it
// the share is unproven, so that a board once found exclusive is not
// reported so for ever on the strength of an old listing.
const listingStale = 30 * time.Second

// sharing is the part of a [Source] that tracks who uses its boards.
//
// Locks, in the order they nest: refreshMu (held for a whole refresh),
// then Source.mu's read side (held for one NVML call), then shareMu (held
// for one copy). Share takes only shareMu, so it never waits on NVML, and
// ReadEnergy takes only Source.mu's read side, so it never waits for a
// listing call.
type sharing struct {
	// attributed are the pids whose work is attributed, as NVML numbers
	// them: named are those of WithProcesses (or this process), and with
	// a set its members at the latest listing are added, into setBuf,
	// before each listing. Written and read under refreshMu.
	attributed, named []uint32
	set               proctree.Set
	setBuf            []int
	// identifiable is false when the attributed pid is this process's own
	// and this process's pids are in a namespace other than the one NVML
	// reports, so that it cannot be compared. Pids given to WithProcesses
	// are host pids by contract and always compare.
	identifiable bool
	// walkable reports whether this process sees the pids NVML reports in
	// its /proc, so that a listed pid's parents can be read there: only in
	// the host PID namespace.
	walkable bool
	// tree reads a listed pid's parents under the /proc it was given.
	tree proctree.Tree
	now  func() time.Time
	// clock reads the monotonic and the wall clock at once, for the
	// sample cursors.
	clock func() (time.Duration, time.Time)

	refreshMu sync.Mutex
	// cursors[i] is the share listing's position in board i's
	// utilization samples.
	cursors []SampleCursor
	// failing[i] reports whether board i's latest listing failed, so that
	// a failure is reported once, not on every refresh.
	failing []bool
	// failedSince[i] is when board i's listing began failing, outside
	// MIG mode; zero while it succeeds.
	failedSince []time.Time
	// pids is scratch space for the distinct pids of one board, and ours
	// for those of them that are attributed, directly or as descendants.
	pids, ours []uint32
	// migReader lists each MIG device of a board; migProcs is its scratch.
	migReader *ProcessReader
	migProcs  BoardProcesses
	shareMu   sync.Mutex
	shares    []source.Share

	// listing relists the boards every interval until Close; nil when
	// the interval is not positive.
	listing *periodic.Loop
}

// startSharing lists the processes on every board once, then, if the
// interval is positive, starts the goroutine that lists them again every
// interval until Close.
func (s *Source) startSharing(c config) {
	host := c.hostPIDs()
	s.identifiable = c.explicitPIDs || host
	s.walkable = host
	s.tree.Root, s.now, s.clock = c.procRoot, c.now, c.clock
	s.named = addPids(nil, c.pids)
	s.attributed = slices.Clone(s.named)
	s.set = c.set
	n := len(s.devices)
	s.cursors = make([]SampleCursor, n)
	s.failing = make([]bool, n)
	s.failedSince = make([]time.Time, n)
	s.migReader = s.NewProcessReader()
	s.migReader.weigh = false // a complete listing or none; no weights
	s.shares = make([]source.Share, n)
	for i := range s.shares {
		s.shares[i] = unproven()
	}
	s.refreshShares()
	s.listing = periodic.Start(c.shareInterval, s.refreshShares)
}

// stopSharing ends the listing goroutine and waits for it.
func (s *Source) stopSharing() { s.listing.Stop() }

// Share returns how much of Devices()[i]'s energy belongs to the attributed
// processes, as of the latest listing; see the package doc for each layout.
// It makes no NVML call and never waits on one. An i outside Devices()
// yields the zero Share.
func (s *Source) Share(i int) source.Share {
	s.shareMu.Lock()
	defer s.shareMu.Unlock()
	if i < 0 || i >= len(s.shares) {
		return source.Share{}
	}
	return s.shares[i]
}

// refreshShares lists the processes on every board and recomputes the
// shares. It holds Source.mu's read side for one NVML call at a time, so
// that Close waits for at most one call, and it stops at Close.
func (s *Source) refreshShares() {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	if s.set != nil {
		s.setBuf = s.set.AppendPIDs(s.setBuf[:0])
		s.attributed = addPids(append(s.attributed[:0], s.named...), s.setBuf)
	}
	for i := range s.handles {
		sh, ok, err := s.shareOf(i)
		if !ok {
			if s.isClosed() {
				return
			}
			continue // lost: its share stays as it was
		}
		if err != nil && !s.failing[i] {
			otel.Handle(fmt.Errorf("nvmlsource: listing processes on GPU %d %s: %w", s.devices[i].Index, s.devices[i].ID, err))
		}
		s.failing[i] = err != nil
		s.shareMu.Lock()
		s.shares[i] = sh
		s.shareMu.Unlock()
	}
}

func (s *Source) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// call runs f, one NVML call, under Source.mu's read side, unless the
// source is closed or board i lost. It reports whether f ran.
func (s *Source) call(i int, f func()) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.lost[i].Load() != nil {
		return false
	}
	f()
	return true
}

// shareOf computes board i's share; see the package doc for each layout.
// ok is false when the source closed or the board was lost, and the share
// must be left as it is. err is a failed listing: on a board not in MIG
// mode the share then keeps its split and has Processes -1; on a MIG board,
// or one whose MIG mode cannot be read, it is unproven.
//
// The board is exclusive only when a listing proves it: it lists
// processes, all of them attributed, or, outside MIG, it lists none.
func (s *Source) shareOf(i int) (sh source.Share, ok bool, err error) {
	h := s.handles[i]
	var (
		procs, mps []nvml.ProcessInfo
		mode       int
		ret        nvml.Return
	)
	if !s.call(i, func() { mode, _, ret = h.GetMigMode() }) {
		return sh, false, nil
	}
	var mig bool
	switch ret {
	case nvml.SUCCESS:
		mig = mode == nvml.DEVICE_MIG_ENABLE
	case nvml.ERROR_NOT_SUPPORTED:
		// Boards without MIG answer NOT_SUPPORTED.
	default:
		// Whether the list below is complete depends on the mode.
		return unproven(), true, &returnError{op: "GetMigMode", ret: ret}
	}
	if !s.call(i, func() { procs, ret = h.GetComputeRunningProcesses() }) {
		return sh, false, nil
	}
	if ret != nvml.SUCCESS {
		err = &returnError{op: "GetComputeRunningProcesses", ret: ret}
		if mig {
			if ret == nvml.ERROR_NO_PERMISSION {
				// The parent handle lists processes only to a privileged
				// caller: the usual answer to a tenant, not an error.
				err = nil
			}
			return unproven(), true, err
		}
		now := s.now()
		if s.failedSince[i].IsZero() {
			s.failedSince[i] = now
		}
		if now.Sub(s.failedSince[i]) >= listingStale {
			return unproven(), true, err
		}
		sh = s.Share(i)
		sh.Processes = -1
		return sh, true, err
	}
	s.failedSince[i] = time.Time{}
	// MPS clients are listed apart from the MPS server. Drivers without
	// MPS listing answer NOT_SUPPORTED, which leaves the plain list.
	if !s.call(i, func() { mps, _ = h.GetMPSComputeRunningProcesses() }) {
		return sh, false, nil
	}
	s.pids = s.pids[:0]
	for _, list := range [2][]nvml.ProcessInfo{procs, mps} {
		for _, p := range list {
			s.addPid(p.Pid)
		}
	}

	n := len(s.pids)
	switch {
	case n == 0 && mig:
		// An unprivileged caller may be shown no process on the parent
		// handle however many run in the MIG instances: an empty list
		// does not prove the board idle.
		return notSplit(0), true, nil
	case n == 0:
		return exclusive(0), true, nil
	case !s.identifiable:
		// This process's pid cannot be compared with NVML's. A lone
		// process on a board this container sees is most likely this
		// one, but that is a guess: the board is charged whole and
		// flagged, never reported as certainly ours.
		return notSplit(n), true, nil
	}
	mine := s.findOurs()
	if mig {
		return s.migShare(i, mine)
	}

	// Utilization is read even when only attributed processes run, or
	// none of them, so that the cursor stays current and a newcomer is
	// measured from its arrival.
	var samples []nvml.ProcessUtilizationSample
	cur := &s.cursors[i]
	last := cur.Since(s.clock())
	if !s.call(i, func() { samples, ret = h.GetProcessUtilization(last) }) {
		return sh, false, nil
	}
	var ours, total uint64
	measured := false
	switch ret {
	case nvml.SUCCESS, nvml.ERROR_NOT_FOUND:
		// NOT_FOUND: no sample newer than last.
		measured = true
		for _, smp := range samples {
			if !cur.Take(smp.Pid, smp.TimeStamp) {
				continue
			}
			total += uint64(smp.SmUtil)
			if slices.Contains(s.ours, smp.Pid) {
				ours += uint64(smp.SmUtil)
			}
		}
	default:
		// vGPU and some boards have no per-process utilization.
	}
	// The one rule of every GPU source. An attributed process listed but
	// measured at no SM work while others worked is no proof that none of
	// the energy is theirs: an MPS server's utilization is reported
	// against the server, and a child process they did not name may do
	// their work where its ancestry cannot be read.
	return source.ShareOf(source.Listing{Processes: n, Mine: mine, Comparable: true, Measured: measured,
		UsedAll: total, UsedMine: ours}), true, nil
}

// migShare is the share of MIG board i, whose parent handle listed s.pids,
// mine of them attributed. NVML gives no per-process utilization under
// MIG, so the board is either proven theirs or shared and unsplit. The
// parent's list alone proves nothing: whether an unprivileged caller is
// shown every tenant's processes there, or only its own, is the driver's
// to decide. So the board is exclusive only when the listing is known
// complete, every MIG device of the board listed as well, and every
// process on any list is attributed.
func (s *Source) migShare(i, mine int) (source.Share, bool, error) {
	n := len(s.pids)
	if mine < n {
		return notSplit(n), true, nil
	}
	s.migProcs.Reset()
	err := s.migReader.readMIG(i, &s.migProcs)
	switch {
	case errors.Is(err, source.ErrUnavailable) || errors.Is(err, source.ErrDeviceLost):
		return source.Share{}, false, nil
	case errors.Is(err, nvml.ERROR_NO_PERMISSION):
		// A MIG device this caller may not open: the usual answer to a
		// tenant, not an error, and no proof.
		return notSplit(n), true, nil
	case err != nil:
		return notSplit(n), true, err
	}
	for _, p := range s.migProcs.Processes {
		if !slices.Contains(s.pids, p.Pid) {
			s.addPid(p.Pid)
		}
	}
	if s.findOurs() == len(s.pids) {
		return exclusive(len(s.pids)), true, nil
	}
	return notSplit(len(s.pids)), true, nil
}

// addPids appends to dst each valid pid of pids that dst lacks.
func addPids(dst []uint32, pids []int) []uint32 {
	for _, p := range pids {
		if p > 0 && p <= int(^uint32(0)) && !slices.Contains(dst, uint32(p)) {
			dst = append(dst, uint32(p))
		}
	}
	return dst
}

// addPid adds p to s.pids unless it is there.
func (s *Source) addPid(p uint32) {
	if !slices.Contains(s.pids, p) {
		s.pids = append(s.pids, p)
	}
}

// findOurs fills s.ours with the pids of s.pids that are attributed, or
// descend from an attributed pid, and returns how many there are.
func (s *Source) findOurs() int {
	s.ours = s.ours[:0]
	for _, p := range s.pids {
		if s.isOurs(p) {
			s.ours = append(s.ours, p)
		}
	}
	return len(s.ours)
}

// isOurs reports whether pid is attributed, or, where the process tree
// can be read, a descendant of an attributed pid within
// [proctree.MaxAncestry] generations: a server whose runner children do
// the GPU work (Ollama), tensor-parallel workers (vLLM), a wrapped child
// (otelenergy-proxy) are the attributed process's work. The chain is read
// afresh at every listing and nothing is cached, so a pid reused by an
// unrelated process is judged by its own parents.
func (s *Source) isOurs(pid uint32) bool {
	if !s.walkable {
		return slices.Contains(s.attributed, pid)
	}
	return s.tree.Descends(pid, s.attributed)
}

// monoWall returns a clock that reads the monotonic time since origin
// (time.Now's monotonic reading, which a wall-clock step does not move)
// and the wall clock, at once.
func monoWall(origin time.Time) func() (time.Duration, time.Time) {
	return func() (time.Duration, time.Time) {
		now := time.Now()
		return now.Sub(origin), now
	}
}
