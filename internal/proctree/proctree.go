// Package proctree tells whether a process descends from a set of
// attributed processes, reading parents from /proc/<pid>/stat, so that a
// server's workers (vLLM's tensor-parallel workers, Ollama's runners, a
// child wrapped by otelenergy-proxy) count as the server's work. It is the
// rule of the NVML source's shares (see package nvmlsource), for the
// sources that list a GPU's processes themselves.
//
// # Process trees and listeners
//
// [FS], a proc file system at a mount point of the caller's choice, lists
// the processes of trees rooted at given pids ([FS.Trees]), the sockets
// listening on a TCP port ([FS.ListeningInodes], from net/tcp and
// net/tcp6) and the processes holding them ([FS.SocketHolders], from each
// process's fd links), so that a backend is found by its port and
// followed as its tree changes. A [Set] is such a changing set of
// processes, which a source reads at each of its listings. Every read is
// a snapshot: a process may start or exit while it runs, and the next
// read sees it.
//
// The /proc reading of parents is package procfs's, the one reader of
// /proc; this package keeps the names its callers use.
package proctree

import "github.com/otelenergy/otelenergy/internal/procfs"

// MaxAncestry is how many generations up a process's chain is followed.
const MaxAncestry = procfs.MaxAncestry

// Tree reads parents under Root ("/proc"). The zero value with Root set is
// ready to use; a Tree keeps no state and is safe for concurrent use.
type Tree struct {
	Root string
}

// Descends reports whether pid is in ours or descends from one of them
// within MaxAncestry generations, as [procfs.FS.Descends].
func (t *Tree) Descends(pid uint32, ours []uint32) bool {
	return procfs.FS{Root: t.Root}.Descends(pid, ours)
}

// Parent reads pid's parent from <Root>/<pid>/stat, as
// [procfs.FS.Parent].
func (t *Tree) Parent(pid uint32) (uint32, bool) { return procfs.FS{Root: t.Root}.Parent(pid) }

// InHostPIDNamespace reports whether this process runs in the initial PID
// namespace, as [procfs.InHostPIDNamespace].
func InHostPIDNamespace() bool { return procfs.InHostPIDNamespace() }
