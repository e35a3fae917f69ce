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
// utilization times [Physics]' watts per percent. The energy counter is a staircase that steps every
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
// [DefaultScript], -simulate's: board b runs one long-lived server (pid
// 2000+b) at 30 + 10·(b mod 4) % SM, in a Kubernetes pod of its own, busy
// 40 s of every 60 s; even boards also run a trainer (pid 3000+b, 25 %, a
// plain Docker container) from 10 s on. Every 5 s a short job (pid
// 10000+k, 15 %, 2.5 s, no container) starts on board k mod n, for a day.
// The last board of eight or more is in MIG mode. [DefaultPhysics]: 70 W
// idle, 3 W per percent of SM.
//
// [BusyFrom10s], [NeverIdle] and [Churn] are the bench's boards: idle for
// 10 s then busy; busy from the start; a steady job and a churn of 2-4 s
// jobs with idle gaps. Their processes are compute-bound or memory-bound
// ([Kind]) and their loads change every 0.3 to 3 s.
//
// [ParseOptions] reads the knobs from one string, for a -simulate flag:
// physics=membound, lag=400ms, script=bench and the others it lists.
package sim
