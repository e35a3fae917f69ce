package rapl

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/internal/cputime"
	"github.com/otelenergy/otelenergy/internal/periodic"
	"github.com/otelenergy/otelenergy/internal/source"
)

// defaultShareInterval is how often the attributed processes' CPU time is
// read: /proc is walked once per interval.
const defaultShareInterval = 5 * time.Second

// WithProcesses attributes to the named processes, and their descendants,
// their share of the node's CPU time, as Kepler splits CPU energy: each
// zone's energy is split by the CPU time the processes used over the
// node's (see package cputime), and the rest is other processes'. The
// pids are in the numbering of the proc mount (the host's in a container
// with hostPID). By default, and with no pid, every zone is charged whole
// to the Monitor's requests.
func WithProcesses(pids ...int) Option {
	return optionFunc(func(c *config) { c.pids = slices.Clone(pids) })
}

// withProc sets the proc mount and the sharing period; tests use a fake
// /proc and a period of zero or less, which starts no goroutine.
func withProc(root string, interval time.Duration) Option {
	return optionFunc(func(c *config) { c.procRoot, c.shareInterval = root, interval })
}

// sharing is a Source's CPU-time share of its attributed processes.
type sharing struct {
	meter *cputime.Meter // nil without WithProcesses; goroutine-only
	share atomic.Pointer[source.Share]
	loop  *periodic.Loop
}

func (s *Source) startSharing(c config) {
	if len(c.pids) == 0 {
		return
	}
	m := &cputime.Meter{Root: c.procRoot}
	for _, p := range c.pids {
		m.Pids = append(m.Pids, uint32(p))
	}
	s.sharing.meter = m
	unknown := source.UnknownShare()
	s.sharing.share.Store(&unknown)
	s.refreshShare()
	s.sharing.loop = periodic.Start(c.shareInterval, s.refreshShare)
}

// refreshShare reads the CPU times and publishes the share. A failed read
// or an interval without CPU time keeps the share unproven: shared, not
// split.
func (s *Source) refreshShare() {
	f, ok, err := s.sharing.meter.Sample()
	if err != nil {
		otel.Handle(fmt.Errorf("rapl: reading CPU time: %w", err))
	}
	sh := source.UnknownShare()
	if ok && err == nil {
		sh.Split, sh.Fraction = true, f
	}
	s.sharing.share.Store(&sh)
}

func (s *Source) stopSharing() { s.sharing.loop.Stop() }

// Share returns the attributed processes' CPU-time share of every zone,
// as of the latest reading of /proc. Without [WithProcesses] every zone is
// the requests' whole: Split, Fraction 1.
func (s *Source) Share(int) source.Share {
	if p := s.sharing.share.Load(); p != nil {
		return *p
	}
	return source.Share{Processes: -1, Split: true, Fraction: 1}
}
