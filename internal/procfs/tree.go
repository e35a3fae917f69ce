package procfs

import (
	"os"
	"slices"
)

// Parent reads pid's parent from <Root>/<pid>/stat. ok is false when the
// file cannot be read or parsed, as for a process that has exited.
func (f FS) Parent(pid uint32) (uint32, bool) {
	fd, err := os.Open(f.path(pid, "stat"))
	if err != nil {
		return 0, false
	}
	defer fd.Close()
	// The fields up to the parent's fit in 1 KiB: a pid, a command name
	// of at most 64 bytes (TASK_COMM_LEN, escaped), a state.
	var buf [1024]byte
	k, _ := fd.Read(buf[:])
	return ParseParent(buf[:k])
}

// Descends reports whether pid is in ours or descends from one of them
// within MaxAncestry generations. The chain is read afresh at each call
// and nothing is cached, so a reused pid is judged by its own parents.
func (f FS) Descends(pid uint32, ours []uint32) bool {
	if slices.Contains(ours, pid) {
		return true
	}
	p := pid
	for range MaxAncestry {
		pp, ok := f.Parent(p)
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
