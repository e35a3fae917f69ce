package proctree

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// ErrNoProc reports a mount point that holds no proc file system this
// package can read.
var ErrNoProc = errors.New("proctree: no proc file system")

// FS is a proc file system mounted at a root, as prometheus/procfs's FS
// is: every path it reads is under that root, so that tests give it a
// fake tree (testdata/proc) and a container gives it the host's /proc
// mounted elsewhere. The zero value reads nothing; create one with
// [NewFS]. An FS is a value and safe for concurrent use: it keeps no
// state.
type FS struct {
	root string
}

// NewFS returns the proc file system mounted at mountPoint ("/proc" on
// Linux). It fails with an error wrapping [ErrNoProc] when mountPoint is
// not a directory.
func NewFS(mountPoint string) (FS, error) {
	fi, err := os.Stat(mountPoint)
	if err != nil {
		return FS{}, fmt.Errorf("%w at %s: %w", ErrNoProc, mountPoint, err)
	}
	if !fi.IsDir() {
		return FS{}, fmt.Errorf("%w at %s: not a directory", ErrNoProc, mountPoint)
	}
	return FS{root: mountPoint}, nil
}

// Root returns the mount point the FS reads under.
func (fs FS) Root() string { return fs.root }

// Pids appends the pid of every process listed under the root to dst, in
// the directory's order, and returns the extended slice.
func (fs FS) Pids(dst []int) ([]int, error) {
	d, err := os.Open(fs.root)
	if err != nil {
		return dst, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return dst, err
	}
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			dst = append(dst, pid)
		}
	}
	return dst, nil
}

// Trees appends to dst the live members of the process trees rooted at
// roots, each pid once, and returns the extended slice: every root that
// is listed under the root, and every listed process whose chain of
// parents reaches one, however deep. It reads each listed process's stat
// once, so its cost grows with the number of processes on the host, not
// with the trees'. A process that exits while it is read is left out, as
// are its descendants when it was their only link to a root; a root that
// is not listed is not a member, and its orphans, reparented elsewhere,
// are not either.
//
// The trees are a snapshot of one pass: a process started during it may
// be missing, and is found by the next.
func (fs FS) Trees(dst []int, roots ...int) ([]int, error) {
	pids, err := fs.Pids(nil)
	if err != nil {
		return dst, err
	}
	children := make(map[int][]int, len(pids))
	alive := make(map[int]bool, len(pids))
	t := Tree{Root: fs.root}
	for _, p := range pids {
		pp, ok := t.Parent(uint32(p))
		if !ok {
			continue // exited since the listing
		}
		alive[p] = true
		children[int(pp)] = append(children[int(pp)], p)
	}
	start := len(dst)
	seen := make(map[int]bool, len(roots))
	for _, r := range roots {
		if alive[r] && !seen[r] {
			seen[r] = true
			dst = append(dst, r)
		}
	}
	// Breadth first from the roots; a pid reached twice (a root that
	// descends from another root) is kept once.
	for i := start; i < len(dst); i++ {
		for _, c := range children[dst[i]] {
			if !seen[c] {
				seen[c] = true
				dst = append(dst, c)
			}
		}
	}
	return dst, nil
}

// path joins elems under the root.
func (fs FS) path(elems ...string) string {
	return filepath.Join(append([]string{fs.root}, elems...)...)
}
