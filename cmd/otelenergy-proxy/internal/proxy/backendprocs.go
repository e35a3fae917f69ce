package proxy

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/otelenergy/otelenergy/internal/proctree"
)

// backendProcs is the backend's process set: at each call of AppendPIDs,
// the live process trees of the wrapped child (wrapper mode) and of the
// processes that hold the socket listening on -backend's port (when the
// backend is on this host), as /proc shows them at that call. The NVML
// source calls it at each of its process listings, so that a runner a
// server starts at its first request, or again after an idle unload, is
// attributed from the first listing that sees it, and a process that
// exits drops out at the next; a backend that restarts under a new pid
// is found again by its port.
//
// It reads /proc, which costs a pass over every process's stat (and,
// when the listener's holder changed, every process's descriptors), so
// it runs on the listing's goroutine, never on a request's. It is safe
// for concurrent use; each change of its members is logged once.
type backendProcs struct {
	fs    proctree.FS
	child int // the wrapped child's pid; 0 in front mode
	port  int // -backend's port, looked for on this host; 0: not looked for
	log   *slog.Logger

	mu sync.Mutex
	// holders are the pids found holding the listener last; a later call
	// checks them first, and scans every process only when none holds it.
	holders []int
	// last are the members of the previous call, sorted; seen reports
	// whether there was one.
	last  []int
	seen  bool
	roots []int
}

var _ proctree.Set = (*backendProcs)(nil)

// procsEvery is how often the proxy itself lists the backend's processes
// when no source does (a simulated GPU, a source without per-process
// listing): often enough that the log follows the backend, at NVML's
// listing period.
const procsEvery = 5 * time.Second

// newBackendProcs returns the process set of the child with pid child (0
// in front mode) and of the listener of backend's port when backend names
// this host, read from the proc file system at procRoot; nil when there
// is neither, or no proc file system to read them from.
func newBackendProcs(procRoot string, child int, backend *url.URL, lg *slog.Logger) *backendProcs {
	port := 0
	if local(backend.Hostname()) {
		port = backendPort(backend)
	}
	if child == 0 && port == 0 {
		return nil
	}
	fs, err := proctree.NewFS(procRoot)
	if err != nil {
		lg.Warn("the backend's processes cannot be listed: pass -backend-pid with their host pids", slog.Any("error", err))
		return nil
	}
	return &backendProcs{fs: fs, child: child, port: port, log: lg}
}

// backendPort is u's port, or its scheme's.
func backendPort(u *url.URL) int {
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	return map[string]int{"http": 80, "https": 443}[u.Scheme]
}

// local reports whether host is this host: "localhost", a loopback
// address or an address of one of its interfaces. A name is resolved,
// within a second; one that does not resolve is not this host. A process
// of this host that listens on the same port as a remote backend is not
// the backend.
func local(host string) bool {
	if host == "localhost" || host == "" {
		return true
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ips, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		addrs = ips
	}
	ifaddrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		a = a.Unmap()
		if a.IsLoopback() || a.IsUnspecified() {
			return true
		}
		for _, ia := range ifaddrs {
			if n, ok := ia.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
					return true
				}
			}
		}
	}
	return false
}

// AppendPIDs appends the set's members as they stand now: the trees of
// the child, while it lives, and of the listener's holders.
func (b *backendProcs) AppendPIDs(dst []int) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	began := time.Now()
	b.roots = b.roots[:0]
	if b.child > 0 {
		b.roots = append(b.roots, b.child)
	}
	b.roots = append(b.roots, b.listeners()...)
	start := len(dst)
	dst, err := b.fs.Trees(dst, b.roots...)
	if err != nil && !b.seen {
		b.log.Warn("listing the backend's processes", slog.Any("error", err))
	}
	b.logChange(dst[start:])
	// One line per listing, at debug: when it began, so that a reader
	// can tell which listings a process that started before then is in.
	b.log.Debug("listed the backend's processes", slog.Any("attributed_pids", dst[start:]), slog.Time("began", began))
	return dst
}

// listeners returns the pids holding the socket that listens on b.port.
// The holders found last are checked first: a scan of every process's
// descriptors is needed only when the listener changed hands (the
// backend restarted) or was not found before.
func (b *backendProcs) listeners() []int {
	if b.port == 0 {
		return nil
	}
	inodes, _ := b.fs.ListeningInodes(b.port)
	if len(inodes) == 0 {
		b.holders = b.holders[:0]
		return nil
	}
	kept := slices.DeleteFunc(b.holders, func(p int) bool { return !b.fs.HoldsSocket(p, inodes) })
	if len(kept) > 0 {
		b.holders = kept
		return kept
	}
	b.holders, _ = b.fs.SocketHolders(kept, inodes)
	return b.holders
}

// logChange logs the members when they differ from the previous call's.
func (b *backendProcs) logChange(members []int) {
	now := slices.Sorted(slices.Values(members))
	if b.seen && slices.Equal(now, b.last) {
		return
	}
	var added, removed []int
	for _, p := range now {
		if !slices.Contains(b.last, p) {
			added = append(added, p)
		}
	}
	for _, p := range b.last {
		if !slices.Contains(now, p) {
			removed = append(removed, p)
		}
	}
	b.seen, b.last = true, now
	b.log.Info("the backend's processes", slog.Any("attributed_pids", now), slog.Any("added", added), slog.Any("removed", removed))
}

// watch lists the set every procsEvery until ctx ends, for a source that
// does not list it itself, so that the log follows the backend.
func (b *backendProcs) watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var buf []int
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		buf = b.AppendPIDs(buf[:0])
	}
}
