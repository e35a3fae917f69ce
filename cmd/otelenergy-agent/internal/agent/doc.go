// Package agent is the node agent's engine: once per process interval it
// reads each board's new counter intervals from the library's Monitor,
// lists the board's compute processes and their utilization samples,
// divides the energy with package attrib (samples aligned by their
// timestamps, a learned power model, the idle power) over package
// procshare (the conserving split among processes), and keeps the
// per-process, idle and unattributed totals that its instruments export.
//
// # What it exports
//
//   - hw.energy (Counter, J): the board's energy as the library's tracker
//     totals it, as of the newest counter step the agent has split, so
//     that at every export, per board,
//     Σ otelenergy.process.energy + otelenergy.energy.idle +
//     otelenergy.energy.unattributed = hw.energy, exactly in integer
//     millijoules (each is exported as mJ/1000). It trails the live
//     counter by up to [Config.SampleHold] plus one process interval:
//     intervals wait there for their utilization samples.
//   - otelenergy.process.energy (Counter, J): each compute process's
//     share, with hw.id, process.pid, process.creation.time,
//     process.executable.name and, when
//     the process's cgroup names them, container.id and k8s.pod.uid. On a
//     board without per-process utilization (MIG, vGPU) the shares are
//     splits by MIG instance (GPM activity × compute slices, or slices)
//     or even ones, and carry otelenergy.energy.shared=true, and each MIG
//     process names its instance (otelenergy.gpu.instance, the MIG device
//     UUID). Two series per board hold what no live series does:
//     otelenergy.process.exited=true, the totals of processes whose own
//     series has ended, and otel.metric.overflow=true, the processes
//     beyond the series cap.
//   - otelenergy.energy.idle and otelenergy.energy.unattributed (Counter,
//     J, per hw.id).
//   - With [Config.Carbon]: otelenergy.process.co2e (Counter, g, the
//     attributes of otelenergy.process.energy) and
//     otelenergy.co2e.unattributed (Counter, g, per hw.id), each counter
//     interval's energy converted as it is split, at the intensity in force
//     when it was metered (the model is noted once per pass), so that per
//     board Σ process.co2e + co2e.unattributed = Σ over split intervals of
//     the interval's energy × intensity × PUE, rounded once per interval,
//     plus the embodied emissions of the split time, exactly in µg; and
//     the gauges otelenergy.carbon.intensity (g/kW.h, with
//     otelenergy.carbon.source and otelenergy.carbon.kind) and
//     otelenergy.carbon.intensity.age (s, from [Config.CarbonAge]).
//   - otelenergy.agent.series.overflow (Counter, {process}) and
//     otelenergy.process.listing.errors (Counter, {error}, per hw.id).
//   - otelenergy.device.processes (Gauge, {process}, per hw.id): the
//     processes of the board's latest successful listing.
//   - otelenergy.agent.power_model.coefficient (Gauge, W, per hw.id and
//     otelenergy.power_model.term) and otelenergy.agent.power_model.data
//     (Gauge, s): each measured board's power model; and
//     otelenergy.agent.idle.power (Gauge, W) and otelenergy.agent.idle.data
//     (Gauge, s), per hw.id and otelenergy.idle.source: the idle power the
//     split uses and the data behind it.
//
// # The host's CPU and DRAM
//
// With [Config.Host], each pass also splits the host's RAPL domains
// (hw.type cpu for a CPU package, memory for its DRAM) among the processes
// that have a series of their own on some board, by their CPU time (see
// package hostshare), and the same instruments export each domain per
// hw.id: hw.energy, otelenergy.process.energy (one series per process and
// domain, with the domain's hw.id and hw.type and the process's
// attributes), otelenergy.energy.idle and otelenergy.energy.unattributed,
// with the same exact identity per domain. A whole-host domain (psys) is
// exported as hw.host.energy only.
//
// With [Config.Carbon], each domain's split of each pass is converted
// through the same model, in the pass, at the reading in force over the
// pass's interval (the one noted at the previous pass: the boards' steps
// of that span get it too), and exported on otelenergy.process.co2e (the
// attributes of the process's otelenergy.process.energy series on the
// domain) and otelenergy.co2e.unattributed (per hw.id, idle and
// unattributed energy's), so that per domain Σ process.co2e +
// co2e.unattributed = Σ over passes of the pass's energy × intensity ×
// PUE, rounded once per pass, exactly in µg. Operational only: the
// embodied emissions per device-hour are the accelerator's, charged on
// the boards.
//
// # Process identity and churn
//
// A process is a (board, pid, start time) triple: the start time, field
// 22 of /proc/<pid>/stat, is read for every listed pid at every pass, so
// a pid reused by a new process gets a new series even when no listing
// missed it. The series carries the start time as semconv's
// process.creation.time (boot time plus the start time), so that two
// processes on one pid with the same name and container are two series
// and no exported counter goes backwards. A process has ended when a
// listing misses it and its pid is gone from /proc or holds another start
// time, or when a listing shows another process on its pid; a listing
// that misses a process still running ends nothing, so that a later
// listing resumes its series rather than starting one with the same
// attributes at zero. An ended process keeps its total until the next
// export, which observes it one last time; then its series ends and its
// total moves to the board's exited series, so sums over the board stay
// exact.
//
// A process beyond the series cap is tracked by pid and start time only,
// its energy going to the overflow series; it is forgotten when a listing
// misses it. Once the cap has room, a listed overflow process, whether
// the same one or a new one on its pid, gets a series of its own, a new
// attribute set that starts at zero.
//
// # Failures
//
// A failed listing leaves the board's series as they are and makes the
// window's active energy unattributed; a failed listing of one MIG
// instance does that for the instance's share only; the first failure of a run is
// reported through otel.Handle and every one is counted. A lost board is
// never listed again; its processes' series end at the next export. No
// device error stops the agent.
//
// # Concurrency
//
// [Agent.Pass] and the instruments' callback serialize on one mutex; the
// callback never calls NVML. A pass over boards without MIG allocates
// nothing in steady state (no new process).
package agent
