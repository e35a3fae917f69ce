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
package proctree

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// MaxAncestry is how many generations up a process's chain is followed.
const MaxAncestry = 8

// Tree reads parents under Root ("/proc"). The zero value with Root set is
// ready to use; a Tree is not safe for concurrent use (it keeps a read
// buffer).
type Tree struct {
	Root string
	buf  []byte
}

// Descends reports whether pid is in ours or descends from one of them
// within MaxAncestry generations. The chain is read afresh at each call
// and nothing is cached, so a reused pid is judged by its own parents.
func (t *Tree) Descends(pid uint32, ours []uint32) bool {
	if slices.Contains(ours, pid) {
		return true
	}
	p := pid
	for range MaxAncestry {
		pp, ok := t.Parent(p)
		// pid 1 may be ours (a server that is its container's init):
		// the chain stops at 0, above it.
		if !ok || pp == 0 || pp == p {
			return false
		}
		if slices.Contains(ours, pp) {
			return true
		}
		p = pp
	}
	return false
}

// Parent reads pid's parent from <Root>/<pid>/stat: its fourth field,
// counted after the last ')' since the command name, the second, may hold
// spaces and parentheses. ok is false when the file cannot be read or
// parsed, as for a process that has exited.
func (t *Tree) Parent(pid uint32) (uint32, bool) {
	f, err := os.Open(filepath.Join(t.Root, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	if cap(t.buf) == 0 {
		t.buf = make([]byte, 1024)
	}
	// The fields up to the parent's fit in 1 KiB: a pid, a command name
	// of at most 64 bytes (TASK_COMM_LEN, escaped), a state.
	k, _ := f.Read(t.buf[:cap(t.buf)])
	b := t.buf[:k]
	r := bytes.LastIndexByte(b, ')')
	if r < 0 {
		return 0, false
	}
	fields := bytes.Fields(b[r+1:])
	if len(fields) < 2 {
		return 0, false
	}
	pp, err := strconv.ParseUint(string(fields[1]), 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(pp), true
}

// InHostPIDNamespace reports whether this process runs in the initial PID
// namespace, whose pids are the ones GPU libraries report: the initial
// namespace's inode is fixed by the kernel (PROC_PID_INIT_INO,
// 4026531836). When it cannot be told, it reports true, the better guess
// outside containers.
func InHostPIDNamespace() bool {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return true
	}
	return ns == "pid:[4026531836]"
}
