// Package hostshare splits the host's CPU and DRAM energy, as RAPL meters
// it per domain (a package's hw.type cpu, its DRAM's hw.type memory), among
// the processes the agent tracks, by their CPU time, as Kepler splits a
// node's CPU energy.
//
// # The split
//
// Once per agent pass, for each domain d of energy E (mJ, the tracker's
// delta since the previous pass) and the node's CPU time since then
// (/proc/stat, all CPUs: busy ticks B of T in all), package cputime's
// Split gives
//
//   - idle: E × (T − B) / T, the part of the interval no CPU was busy;
//   - each tracked process p: (E − idle) × t_p / max(B, Σ t), where t_p is
//     the CPU time its tree used since the previous pass: its own utime +
//     stime, and its children's, as the library's share counts a tree
//     (cputime.Trees: each live process's time goes to its nearest
//     tracked ancestor-or-self, and a child reaped in between is not
//     counted twice);
//   - unattributed: the rest, (E − idle) less the processes' parts: the
//     CPU time of processes the agent does not track and the kernel's
//     interrupts.
//
// The parts are cumulative floors (package split), so every part is an
// integer number of millijoules within one of its exact share, and per
// domain and at every export Σ otelenergy.process.energy +
// otelenergy.energy.idle + otelenergy.energy.unattributed = hw.energy
// exactly.
//
// # Emissions
//
// Given an [Emissions] (the agent's carbon model), Pass converts each
// domain's split once per pass: the processes' parts as the shares, idle
// and unattributed energy as the rest, into µg that add up exactly to the
// pass's energy converted, rounded once. Observe exports them on
// otelenergy.process.co2e, with the attributes of each process's energy
// series (the exited series included), and otelenergy.co2e.unattributed
// per hw.id; so per domain Σ process.co2e + co2e.unattributed = Σ over
// passes of the converted energy, exactly. Without one, nothing is
// converted or exported. The caller picks the intensity and keeps its
// model's calls on one goroutine: Pass calls Convert on its own.
//
// # Which processes
//
// The processes are those the agent already tracks: the GPU processes
// with a series of their own. Their identity (pid, start time, container,
// pod) is known and their number is already capped by -max-series, so a
// domain holds at most that many process series plus one exited series;
// a node's thousands of short-lived CPU processes (shells, probes, the
// kubelet) would churn series without bound. Their CPU energy is the
// domain's unattributed energy, unless they descend from a tracked
// process. A process is given the CPU time it used since the previous
// pass from the first pass that tracks it on (all of it when it started
// since); the agent's first pass only takes baselines.
//
// # Whole-host figures
//
// A psys domain (Intel's platform domain) covers the packages, their DRAM
// and more, so it is never split nor summed with them: it is exported as
// hw.host.energy only.
//
// # Failures
//
// A domain whose counter cannot be read keeps its figures; its next
// reading's energy, which spans more than one pass, is unattributed. A
// pass whose /proc cannot be read makes every domain's energy
// unattributed. No failure stops the agent.
//
// # Concurrency
//
// A [Host] is not safe for concurrent use: the agent calls Pass and
// Observe under its own mutex.
package hostshare
