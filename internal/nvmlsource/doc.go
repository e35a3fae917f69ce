// Package nvmlsource reads the cumulative energy counters of NVIDIA GPUs
// through NVML (libnvidia-ml.so.1, loaded at run time by go-nvml) and offers
// them as a [source.Source], a [source.Skipper] and a [source.Sharer].
//
// The adapter needs cgo on Linux. Every other build compiles a stub whose
// [New] returns an error wrapping [source.ErrUnavailable], so the rest of the
// module builds with CGO_ENABLED=0 and never picks a simulated source
// silently: choosing a fallback is the caller's decision.
//
// # Board-level energy
//
// NVML's GetTotalEnergyConsumption returns millijoules consumed by the whole
// board since the driver was last loaded (Volta and newer). [Source.ReadEnergy]
// returns that raw value unchanged. A counter that goes backwards after a
// driver reload or a GPU reset is passed through as it is; turning raw values
// into non-negative deltas is the tracker's job, not this package's.
//
// # Which GPUs are metered
//
// NVML enumerates every GPU on the machine and ignores CUDA_VISIBLE_DEVICES,
// so [New] chooses for itself, by these rules:
//
//   - [WithDevices] ids, when given, choose exactly those GPUs and override
//     both variables. An id that matches no GPU is an error wrapping
//     [source.ErrNotVisible].
//   - Otherwise CUDA_VISIBLE_DEVICES is read as the CUDA driver reads it:
//     entries separated by commas; set and empty chooses no GPU, unset
//     restricts nothing. The first entry decides what the list is. A list
//     of GPU-<uuid> entries, each a full UUID or a unique prefix of one
//     that keeps "GPU-", or a list of MIG-<uuid> entries (also the legacy
//     MIG-GPU-<uuid>/<gi>/<ci>), each choosing the board it is carved
//     from; an entry of another form ends the list. Otherwise a list of
//     indices, each read like C's strtoul: "1gpu2" is 1, and a UUID prefix
//     without "GPU-" is an index too ("8a4b" is 8) or invalid. The first
//     invalid entry (no leading digit, a negative number, an index past
//     the last GPU, a UUID that matches no GPU or several) hides itself
//     and every entry after it. A repeated index, or a UUID list that names
//     one GPU twice, hides every GPU, as CUDA does. Indices are NVML's,
//     which follow PCI bus order; they are CUDA's only with
//     CUDA_DEVICE_ORDER=PCI_BUS_ID or on a node of identical GPUs, so
//     prefer UUIDs on mixed nodes. docs/operations.md gives the source of
//     each rule and the cases where this package and CUDA may differ.
//   - NVIDIA_VISIBLE_DEVICES is honoured only when every entry is a GPU- or
//     MIG- UUID: the NVIDIA container toolkit writes it in the host's
//     numbering and already narrows what NVML shows inside the container,
//     so indices, "all", "none", "void" and unset restrict nothing. UUIDs
//     matching no GPU are ignored; if none matches, the variable is.
//     When both variables apply, a GPU must pass both.
//
// Several MIG instances of one board choose the board once, because energy
// is board-level, and so do duplicate WithDevices ids. (In
// CUDA_VISIBLE_DEVICES a repeated index or GPU UUID hides every GPU, as
// above.) MIG UUIDs are resolved by listing each MIG-enabled board's MIG
// devices, only when an entry names one.
//
// GPUs not chosen are listed by [Source.Skipped] with a reason wrapping
// [source.ErrNotVisible] and are not reported further: on a shared node
// they are the normal layout. When New succeeds, it reports once through
// otel.Handle, as one joined error, the chosen GPUs it leaves out (no
// counter, failed probe), any invalid entry of either variable, and any
// CUDA_VISIBLE_DEVICES entry read as an index with text after its digits
// ("1gpu2"), a likely typo. When
// nothing is chosen, New fails with [source.ErrNoDevices] and
// [source.ErrNotVisible], naming the rule and listing the GPUs NVML shows.
//
// # Shared GPUs
//
// A [Source] lists the compute processes on every metered board in New and
// then every 5 s on a goroutine of its own, which Close stops and waits
// for. [Source.Share] returns the latest result without calling NVML. The
// attributed processes are this process, or those of [WithProcesses], and,
// where this process runs in the host PID namespace, their descendants: a
// listed pid whose parent chain in /proc/<pid>/stat (the parent is field
// 4, read after the last ')' since the command name may hold spaces and
// parentheses) reaches an attributed pid within 8 generations is counted
// as attributed. So a server whose runner children do the GPU work
// (Ollama), tensor-parallel workers (vLLM) and a child wrapped by
// otelenergy-proxy are the attributed process's work. The chain is read
// afresh at every listing and nothing is cached, so a reused pid is
// judged by its own parents. In a PID namespace of its own, /proc numbers
// processes differently from NVML, and no ancestry is read: name the
// workers' host pids with WithProcesses. With [WithProcessSet] the
// attributed processes are those of WithProcesses and the set's members
// as they stand at each listing (the set is read once per listing, on the
// listing's goroutine): a process that joins the set is attributed from
// the first listing after it joined, and one that left it is not, even
// when NVML lists a process under its pid, reused.
//
// The board is reported exclusive only when a listing proves it; every
// layout that cannot be split or proven is Shared true and Split false, so
// that the board is charged whole and requests are flagged shared and
// approximate rather than given a confident figure.
//
//   - Only attributed processes on the board, or none outside MIG mode:
//     Shared false, Split true, Fraction 1.
//   - Attributed processes and others, with per-process utilization:
//     Fraction is the attributed processes' part of the SM utilization
//     summed over the samples newer than the previous listing's
//     (GetProcessUtilization with the last timestamp seen, as Kepler
//     does). When no process used the SMs in the interval, the board is
//     split evenly among the listed processes. Shared and Split are true.
//   - Attributed processes and others without per-process utilization
//     (MIG mode, vGPU, GetProcessUtilization answering NOT_SUPPORTED):
//     Shared true, Split false.
//   - Processes listed, none of them attributed: Shared true, Split false.
//     A Fraction of 0 would give every request a confident zero, yet the
//     usual cause is an attributed pid that is wrong or absent (a gateway
//     attributed to itself), not a board that does no work for it.
//   - Attributed processes listed but measured no SM work while others
//     did: Shared true, Split false. A measured 0 is no proof either: MPS
//     reports utilization against the server's pid, and a child process
//     may do the attributed processes' work.
//   - MIG mode enabled: Shared false, Split true, Fraction 1 only when the
//     listing is known complete and every process on it is attributed:
//     the parent handle lists processes, and every MIG device of the
//     board (GetMaxMigDeviceCount slots, each handle from
//     GetMigDeviceHandleByIndex, NOT_FOUND an empty slot) lists its own.
//     Otherwise Shared true, Split false: NVML lists the parent handle's
//     processes only to a privileged caller, and whether an unprivileged
//     one is shown a list filtered to its own processes is the driver's
//     to decide, so neither the parent's list alone nor an empty one
//     proves anything. A parent listing refused with NO_PERMISSION is the
//     usual answer to a MIG tenant and is not reported as an error (its
//     share is Processes -1); so is a MIG device the caller may not open.
//   - MIG mode unreadable (an error other than NOT_SUPPORTED), or the
//     first listing fails: Shared true, Split false, Processes -1.
//
// Processes is the number of distinct pids listed, MPS clients included.
// When a listing fails on a board not in MIG mode, Processes is -1 and the
// rest of the share is kept for up to 30 s of failures (six refreshes at
// the default interval); after that the share is unproven, Shared true and
// Split false, until a listing succeeds again, so that an old listing
// never proves a board exclusive for ever. Every unexpected failure is
// reported once through otel.Handle until a listing succeeds again. A
// board found lost keeps its last share.
//
// # Containers
//
// NVML reports pids in the host's PID namespace. Pids given to
// [WithProcesses] are host pids by contract and are compared wherever this
// process runs. The default, this process's own pid, is in the container's
// numbering when this process runs in a PID namespace of its own, and
// cannot be compared. There a board with any process is Shared true and
// Split false: a lone process on a board this container sees is most
// likely this one, but that is a guess, so the board is charged whole (the
// figure a proven exclusive board would get) and its requests are flagged
// shared and approximate. Pass the host pid with WithProcesses, or run in
// the host PID namespace, for exact figures.
//
// A listing makes, per board, GetMigMode, GetComputeRunningProcesses,
// GetMPSComputeRunningProcesses and GetProcessUtilization; only the first
// three when no process holds the board or pids cannot be compared, and no
// GetProcessUtilization under MIG. Under MIG, when the parent's list holds
// only attributed processes, it also lists each MIG device
// (GetMaxMigDeviceCount, then GetMigDeviceHandleByIndex, GetUUID and
// GetComputeRunningProcesses per device). Where ancestry is read, it
// reads /proc/<pid>/stat for up to 8 ancestors of each listed pid that is
// not attributed. NVML is thread-safe, so these calls run
// beside the sampler's ReadEnergy: a reading never waits for a listing
// call, however slow.
//
// # Utilization samples and the wall clock
//
// NVML stamps utilization samples with the wall clock and returns those
// stamped after the caller's timestamp. Both listings, the share's and
// each [ProcessReader]'s, keep their own [SampleCursor] per board: after a
// backward step of the wall clock (NTP, a VM resume) it lowers the query
// so that the new samples, stamped below the old ones, come back, and
// takes none of the old ones, still in the driver's buffer, twice. A step
// back longer than its record of recent samples loses the samples stamped
// before the record's oldest, as a plain lastSeenTimeStamp would.
//
// # Power bound
//
// Each device's [source.Device.MaxWatts] is the most its power limit can be
// set to (the maximum of GetPowerManagementLimitConstraints) times 1.5, read
// once in [New]. The limit in force (GetEnforcedPowerLimit) is no bound: it
// can be raised at any time (nvidia-smi -pl, a DCGM power policy), and a
// bound read from it would then class every real step above it a glitch.
// The enforced limit is used where it is higher than that maximum or where
// the constraints do not answer; where neither answers (both NOT_SUPPORTED
// on some boards), MaxWatts is 0 and the sampler's default bound applies.
// A bound from the constraints' maximum is firm ([source.Device.MaxWattsFirm]):
// the sampler never raises it, because no setting lets the board draw
// above it, so readings above it are a misreading. A bound from the
// enforced limit, or the default, may be learned up (see the tracker
// package).
//
// # MIG
//
// Energy is a property of the board, not of a MIG instance. [New] enumerates
// physical GPUs with DeviceGetCount and DeviceGetHandleByIndex, which never
// return MIG device handles, so each board appears once in
// [Source.Devices] and is read once per call to [Source.ReadEnergy], however
// many MIG instances it is partitioned into. Reporting the board's energy once
// per instance would multiply it (dcgm-exporter issue #317).
//
// # Unsupported and unreadable devices
//
// [New] fetches every GPU's handle and UUID, then probes each chosen GPU
// once: it fetches the name and reads the energy counter. A GPU that fails any of these, for example one that
// answers ERROR_NOT_SUPPORTED because it predates Volta or is a vGPU without
// the counter, is left out of [Source.Devices] and reported by
// [Source.Skipped] with a reason wrapping [source.ErrNotSupported],
// [source.ErrDeviceLost] or [source.ErrRead]. A GPU whose handle or UUID
// cannot be read is reported the same way, chosen or not, since whether it
// was chosen cannot be told. When no chosen GPU is readable, New
// shuts NVML down and returns an error wrapping [source.ErrNoDevices] and
// every skipped device's reason, so errors.Is matches both ErrNoDevices and,
// for example, ErrNotSupported.
//
// # Lost devices
//
// A read that returns ERROR_GPU_IS_LOST marks the device lost: that read and
// every later one for the device return an error wrapping
// [source.ErrDeviceLost] at once, without calling NVML, while the other
// devices go on being read. Any other failed read wraps [source.ErrRead] and
// leaves the device readable, because the next good reading's delta covers
// the gap.
//
// # Init failure
//
// go-nvml loads the library inside Init. After a failed Init the library may
// not be loaded, and calling any other NVML function then resolves an absent
// symbol, which kills the process ("symbol lookup error", exit status 127);
// recover cannot stop it. So after a failed Init this package calls no other
// NVML function at all, Shutdown included, and returns an error wrapping
// [source.ErrUnavailable] that names the return code (for example
// ERROR_LIBRARY_NOT_FOUND, ERROR_DRIVER_NOT_LOADED or ERROR_NO_PERMISSION).
// errors.Is also matches the nvml.Return value itself. Error messages are
// built from a local table of return-code names rather than from
// nvml.Return's Error method, which calls into the library through a
// package-level function pointer that go-nvml swaps without synchronization.
//
// # Shutdown
//
// After a successful Init, Shutdown is called exactly once: by New when it
// fails after Init, or by the first [Source.Close]. Every NVML call holds
// the read side of one RWMutex and Close takes its write side around
// Shutdown; Close first stops the process listing and waits for it. So no
// NVML call can run during or after Shutdown, and calls never wait for one
// another.
package nvmlsource
