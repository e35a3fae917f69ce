// Package procfs is the one reader of /proc: every package that needs a
// process's parent, start time, CPU time, name or cgroup, or the node's
// CPU time, reads it here, and /proc/<pid>/stat and /proc/stat are
// parsed in one place each ([ParseStat], the cpu line of [Scanner.NodeTicks]).
//
//   - [FS] reads one process at a time: its start time, which tells a
//     reused pid from the process that held it before, its executable
//     name and the container and Kubernetes pod its cgroup places it in
//     ([FS.Info]), its parent ([FS.Parent]) and whether it descends from
//     a set of attributed processes ([FS.Descends]), and the node's boot
//     time. It keeps no state and is safe for concurrent use.
//   - [Scanner] reads the node's CPU time and every process's stat in
//     one pass, allocating nothing in steady state, and sums each
//     attributed process's tree ([Scanner.Trees]): the CPU-time share of
//     the host's energy (packages cputime and the agent's hostshare).
//
// No package hard-codes /proc: each takes the mount point ("" means
// /proc), so tests read fake trees under testdata/ or t.TempDir().
//
// # Which processes
//
// GPU libraries report pids in the host's PID namespace, so a reader must
// run in it (hostPID: true in Kubernetes, --pid=host in Docker) for these
// files to be the right processes' ([InHostPIDNamespace] tells).
// Reading another user's /proc/<pid>/stat, comm and cgroup needs no
// privilege on a default kernel; hidepid mounts of /proc need
// CAP_SYS_PTRACE.
//
// # Process trees
//
// A process belongs to an attributed process's tree when that process is
// itself or an ancestor within [MaxAncestry] generations: a server's
// workers (vLLM's tensor-parallel workers, Ollama's runners, a child
// wrapped by otelenergy-proxy) count as the server's work. A tree's CPU
// time is the sum over its live members of utime, stime, cutime and
// cstime: a member that exits and is reaped by another member moves its
// time into that one's cutime and cstime, so the sum does not drop when
// workers come and go.
package procfs
