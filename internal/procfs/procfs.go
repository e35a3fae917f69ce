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
func (f FS) StartTime(pid uint32) (uint64, error) {
	st, err := f.Stat(pid)
	return st.StartTime, err
}

// Stat reads pid's /proc/<pid>/stat ([ParseStat]). It fails with an error
// wrapping [ErrGone] when the process does not exist.
//
// The agent calls it for every listed process at every pass, so it reads
// into a buffer of its own rather than through os.ReadFile: a stat line
// is at most about 1.1 KB (a 64-byte comm and 50 numbers).
func (f FS) Stat(pid uint32) (Stat, error) {
	fd, err := os.Open(f.path(pid, "stat"))
	if err != nil {
		return Stat{}, fmt.Errorf("%w: pid %d: %w", ErrGone, pid, err)
	}
	defer fd.Close()
	var buf [2048]byte
	n, err := fd.Read(buf[:])
	if err != nil && n == 0 {
		return Stat{}, fmt.Errorf("%w: pid %d: %w", ErrGone, pid, err)
	}
	st, ok := ParseStat(buf[:n])
	if !ok {
		return Stat{}, fmt.Errorf("%w: pid %d: malformed stat", ErrGone, pid)
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
