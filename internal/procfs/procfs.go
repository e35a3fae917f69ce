// Package procfs reads what the agent needs to know of a process from
// /proc: its start time, which tells a reused pid from the process that
// held it before, its executable name, and the container and Kubernetes
// pod its cgroup places it in.
//
// NVML reports pids in the host's PID namespace, so the agent must run in
// it (hostPID: true in Kubernetes, --pid=host in Docker) for these files to
// be the right processes'. Reading another user's /proc/<pid>/stat, comm
// and cgroup needs no privilege on a default kernel; hidepid mounts of
// /proc need CAP_SYS_PTRACE.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrGone reports a process that no longer exists (its /proc directory is
// gone) or whose files could not be parsed as a live process's.
var ErrGone = errors.New("procfs: process gone")

// ErrFormat reports a node-wide /proc file this package cannot parse.
var ErrFormat = errors.New("procfs: unexpected format")

// Info is what the agent learns of a process once, when it first sees it.
type Info struct {
	// StartTime is the process's start time in clock ticks since boot,
	// field 22 of /proc/<pid>/stat. With the pid it identifies the
	// process: a reused pid has a later start time.
	StartTime uint64
	// Name is /proc/<pid>/comm: the executable's name, at most 15 bytes.
	Name string
	// ContainerID is the container's 64-hex id from the process's cgroup
	// path (Docker, containerd, CRI-O, Podman), or "".
	ContainerID string
	// PodUID is the Kubernetes pod's UID from a kubepods cgroup path, or
	// "".
	PodUID string
}

// FS reads a /proc tree. The zero value reads /proc.
type FS struct {
	// Root is the directory /proc is mounted at; "" means /proc.
	Root string
}

func (f FS) path(pid uint32, file string) string {
	root := f.Root
	if root == "" {
		root = "/proc"
	}
	return filepath.Join(root, strconv.FormatUint(uint64(pid), 10), file)
}

// StartTime returns pid's start time in clock ticks since boot. It fails
// with an error wrapping [ErrGone] when the process does not exist.
//
// The agent calls it for every listed process at every pass, so it reads
// into a buffer of its own rather than through os.ReadFile: a stat line
// is at most about 1.1 KB (a 64-byte comm and 50 numbers).
func (f FS) StartTime(pid uint32) (uint64, error) {
	fd, err := os.Open(f.path(pid, "stat"))
	if err != nil {
		return 0, fmt.Errorf("%w: pid %d: %w", ErrGone, pid, err)
	}
	defer fd.Close()
	var buf [2048]byte
	n, err := fd.Read(buf[:])
	if err != nil && n == 0 {
		return 0, fmt.Errorf("%w: pid %d: %w", ErrGone, pid, err)
	}
	st, ok := ParseStartTime(buf[:n])
	if !ok {
		return 0, fmt.Errorf("%w: pid %d: malformed stat", ErrGone, pid)
	}
	return st, nil
}

// Info reads pid's start time, name and cgroup. Only the start time is
// required: a missing comm or cgroup leaves its fields empty.
func (f FS) Info(pid uint32) (Info, error) {
	st, err := f.StartTime(pid)
	if err != nil {
		return Info{}, err
	}
	in := Info{StartTime: st}
	if b, err := os.ReadFile(f.path(pid, "comm")); err == nil {
		in.Name = string(bytes.TrimRight(b, "\n"))
	}
	if b, err := os.ReadFile(f.path(pid, "cgroup")); err == nil {
		in.ContainerID, in.PodUID = ParseCgroup(string(b))
	}
	return in, nil
}

// BootTime returns when the host booted, the btime line of <root>/stat,
// which process start times count from.
func (f FS) BootTime() (time.Time, error) {
	root := f.Root
	if root == "" {
		root = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(root, "stat"))
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("procfs: btime %q: %w", strings.TrimSpace(v), err)
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, errors.New("procfs: no btime in " + filepath.Join(root, "stat"))
}

// ParseStartTime returns field 22 of a /proc/<pid>/stat line. The second
// field, the command in parentheses, may itself hold spaces and
// parentheses, so fields are counted from the last ')'.
func ParseStartTime(stat []byte) (uint64, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	rest := stat[i+1:]
	// Fields 3.. follow; field 22 is the 20th of them.
	for n := 0; n < 19; n++ {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			return 0, false
		}
		rest = rest[j:]
	}
	rest = bytes.TrimLeft(rest, " ")
	if j := bytes.IndexAny(rest, " \n"); j >= 0 {
		rest = rest[:j]
	}
	v, err := strconv.ParseUint(string(rest), 10, 64)
	return v, err == nil
}

// containerPrefixes are the runtimes' prefixes of a container's cgroup
// directory under systemd (docker-<id>.scope, cri-containerd-<id>.scope,
// crio-<id>.scope, libpod-<id>.scope).
var containerPrefixes = []string{"docker-", "cri-containerd-", "crio-", "libpod-", "containerd-"}

// ParseCgroup returns the container id and the pod UID that a
// /proc/<pid>/cgroup file names, from cgroup v2's single "0::" line or from
// any v1 hierarchy's path, with the cgroupfs layout (/kubepods/burstable/
// pod<uid>/<id>, /docker/<id>) or the systemd one
// (kubepods-burstable-pod<uid_with_underscores>.slice/
// cri-containerd-<id>.scope, docker-<id>.scope), also when the path is
// relative to the reader's cgroup namespace (0::/../../pod<uid>/<id>). A
// static pod's UID is the 32-hex hash of its manifest. Either may be "".
func ParseCgroup(file string) (containerID, podUID string) {
	for line := range strings.Lines(file) {
		line = strings.TrimRight(line, "\n")
		// hierarchy-ID:controllers:path; the path may contain ':'.
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		c, p := parseCgroupPath(parts[2])
		if containerID == "" {
			containerID = c
		}
		if podUID == "" {
			podUID = p
		}
		if containerID != "" && podUID != "" {
			break
		}
	}
	return containerID, podUID
}

func parseCgroupPath(path string) (containerID, podUID string) {
	// A pod directory is taken only under kubepods, or in a path relative
	// to this process's cgroup namespace ("/../../pod<uid>/<id>"), which
	// hides the kubepods ancestors: "pod<uid>" elsewhere is a name anyone
	// can give a unit.
	podsHere := strings.Contains(path, "kubepods") || strings.HasPrefix(path, "/..")
	for el := range strings.SplitSeq(path, "/") {
		name := strings.TrimSuffix(el, ".scope")
		name = strings.TrimSuffix(name, ".slice")
		for _, pre := range containerPrefixes {
			if rest, ok := strings.CutPrefix(name, pre); ok && isContainerID(rest) {
				containerID = rest
			}
		}
		if isContainerID(name) {
			containerID = name
		}
		if i := strings.LastIndex(name, "pod"); i >= 0 && podsHere {
			if uid := strings.ReplaceAll(name[i+3:], "_", "-"); isUID(uid) || isStaticPodUID(uid) {
				podUID = uid
			}
		}
	}
	return containerID, podUID
}

func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isStaticPodUID reports whether s is a static pod's UID: the kubelet
// names a static pod by the 32-hex hash of its manifest, not by a UUID.
func isStaticPodUID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isUID reports whether s is an RFC 4122 UUID in its 8-4-4-4-12 form.
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// CPUTicks returns pid's own CPU time, utime + stime (fields 14 and 15 of
// /proc/<pid>/stat) in clock ticks, and its start time (field 22), which
// tells whether the pid still holds the same process. It fails with an
// error wrapping [ErrGone] when the process does not exist.
//
// A process's children are not counted (cutime and cstime): the agent
// tracks each GPU process by itself, and a reaped child's time arriving
// in its parent's cutime at once would count twice a child it tracks.
func (f FS) CPUTicks(pid uint32) (ticks, start uint64, err error) {
	fd, err := os.Open(f.path(pid, "stat"))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: pid %d: %w", ErrGone, pid, err)
	}
	defer fd.Close()
	var buf [2048]byte
	n, err := fd.Read(buf[:])
	if err != nil && n == 0 {
		return 0, 0, fmt.Errorf("%w: pid %d: %w", ErrGone, pid, err)
	}
	ticks, start, ok := ParseCPUTicks(buf[:n])
	if !ok {
		return 0, 0, fmt.Errorf("%w: pid %d: malformed stat", ErrGone, pid)
	}
	return ticks, start, nil
}

// ParseCPUTicks returns utime + stime (fields 14 and 15) and the start
// time (field 22) of a /proc/<pid>/stat line, counting fields from the
// last ')' as [ParseStartTime] does.
func ParseCPUTicks(stat []byte) (ticks, start uint64, ok bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, false
	}
	rest := stat[i+1:]
	// Fields 3.. follow: field k is the (k-2)th of them.
	for k := 3; k <= 22; k++ {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexAny(rest, " \n")
		if j < 0 {
			j = len(rest)
		}
		if j == 0 {
			return 0, 0, false
		}
		if k == 14 || k == 15 || k == 22 {
			v, err := strconv.ParseUint(string(rest[:j]), 10, 64)
			if err != nil {
				return 0, 0, false
			}
			if k == 22 {
				start = v
			} else {
				ticks += v
			}
		}
		rest = rest[j:]
	}
	return ticks, start, true
}

// NodeTicks returns the node's CPU time from the first line of
// <root>/stat, in clock ticks over all CPUs: busy is user, nice, system,
// irq, softirq and steal; total adds idle and iowait. Guest time is
// already in user.
func (f FS) NodeTicks() (busy, total uint64, err error) {
	root := f.Root
	if root == "" {
		root = "/proc"
	}
	fd, err := os.Open(filepath.Join(root, "stat"))
	if err != nil {
		return 0, 0, err
	}
	defer fd.Close()
	// The cpu line comes first and is under 200 bytes.
	var buf [512]byte
	n, err := fd.Read(buf[:])
	if err != nil && n == 0 {
		return 0, 0, err
	}
	line := buf[:n]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	rest, ok := bytes.CutPrefix(line, []byte("cpu "))
	if !ok {
		return 0, 0, fmt.Errorf("%w: %s does not start with the cpu line", ErrFormat, filepath.Join(root, "stat"))
	}
	for k := 0; k < 8; k++ {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			j = len(rest)
		}
		v, err := strconv.ParseUint(string(rest[:j]), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %s: field %d: %w", ErrFormat, filepath.Join(root, "stat"), k+2, err)
		}
		total += v
		if k != 3 && k != 4 { // idle, iowait
			busy += v
		}
		rest = rest[j:]
	}
	return busy, total, nil
}
