// Package sim is the agent's -simulate mode and its accuracy bench: a node
// of simulated GPU boards running a script of compute processes. It stands
// where NVML and /proc stand in the real agent: a Source for the library's
// Monitor, a Lister and a Resolver; and it knows the truth the agent
// estimates, each process's energy above idle ([Node.TruthMJ]).
//
// # Physics
//
// Time advances in ticks (Physics.Tick, 1 ms in the bench, 10 ms under
// -simulate). Each board draws its idle power, plus a white noise, plus
// each running process's power: its SM, memory, encoder and decoder
// utilization times [Physics]' watts per percent (time-sliced, with
// Physics.TimeSlice, when the processes' SM would sum past 100 %). The energy counter is a staircase that steps every
// CounterPeriod at a phase of its own per board. The driver samples each
// process's utilization every SamplePeriod, one sample per process that
// used the board in the period, its mean utilization over the period
// rounded to a percent and stamped at the period's end in CPU
// microseconds; a sample becomes visible to [Node.Read] SampleLag after
// its timestamp, and Read returns the visible samples that its
// [nvmlsource.SampleCursor] takes, as a ProcessReader reads
// GetProcessUtilization: those newer than its previous read, and after a
// backward step of the wall clock (Physics.WallStep) the new timeline's,
// none twice. Boards in MIG mode list their processes per instance and
// give no samples.
//
// # Scripts
//
// [DefaultScript], -simulate's, draws like an H100 node serving and
// training ([DefaultPhysics], [DefaultHost]). Board b lists nothing for
// its first 6 to 9 s, so that the agent learns its idle power (about
// 115 W) from those seconds; then a vLLM server (pid 2000+b, in a
// Kubernetes pod of its own) starts, idles 3 or 10 s, and decodes 40 s of
// every minute at 82-97 % SM and 55-70 % memory (a plateau of about
// 375-465 W). Even boards also run a compute-bound trainer (pid 3000+b,
// 95-99 % SM, a plain Docker container) from 10 s on, time-sliced with
// the server (about 570 W alone, 515-535 W beside it). From 15 s on, every
// 5 s a short job (pid 10000+k, 35 % SM, 2.5 s, no container) starts on
// board k mod n, for a day. The last board of eight or more is in MIG
// mode: nothing on it for 16 s, then a notebook (pid 2000+b) busy 20 s of
// every minute, and its share of the jobs. Every process's start is its
// start on the node's wall clock (process.creation.time), and each keeps
// host CPU cores busy (the server 1, the trainer 4, a job 0.8; a fifth of
// that while idle) on the socket of its board, which the host's two
// packages and their DRAM ([Node.Host]) draw for.
//
// [BusyFrom10s], [NeverIdle] and [Churn] are the bench's boards: idle for
// 10 s then busy; busy from the start; a steady job and a churn of 2-4 s
// jobs with idle gaps. Their processes are compute-bound or memory-bound
// ([Kind]) and their loads change every 0.3 to 3 s.
//
// [ParseOptions] reads the knobs from one string, for a -simulate flag:
// physics=membound, lag=400ms, script=bench and the others it lists.
package sim
