package nvmlsource

// ProcessUsage is one compute process on a board as one
// [ProcessReader.Read] saw it.
type ProcessUsage struct {
	// Pid is the process id in the host's PID namespace, as NVML reports
	// it.
	Pid uint32
	// Listed is true for a process that GetComputeRunningProcesses (or
	// its MPS or MIG variant) listed. False marks a pid known only from a
	// utilization sample: a process that used the board in the interval
	// and has since released it or exited.
	Listed bool
	// Instance is the UUID of the MIG device the process runs in, or ""
	// on a board without MIG.
	Instance string
	// SmUtil is the sum of the process's SM utilization samples (in
	// percent) newer than the reader's previous read of the board.
	SmUtil uint64
	// Samples is the number of those samples.
	Samples int
	// Weight is, under MIG, the process's share of the board's active
	// energy relative to the others': its instance's weight (see
	// [Instance]) divided evenly among the instance's processes. Zero
	// elsewhere; all zero splits evenly.
	Weight uint64
}

// Sample is one utilization sample of one process, as NVML's
// GetProcessUtilization returns it: the process's use of the board over
// the span since that process's previous sample, ending at TimeStamp.
type Sample struct {
	// Pid is the process the sample describes.
	Pid uint32
	// TimeStamp ends the sample's span: CPU time in microseconds since
	// the Unix epoch, as NVML stamps it.
	TimeStamp uint64
	// SmUtil, MemUtil, EncUtil and DecUtil are the process's SM, memory
	// (frame buffer bandwidth), encoder and decoder utilization over the
	// span, in percent.
	SmUtil, MemUtil, EncUtil, DecUtil uint32
}

// Utilization says what a board can tell about its processes' use of it.
type Utilization uint8

const (
	// UtilMeasured: GetProcessUtilization answered. SmUtil holds the
	// new samples, none when NVML had no sample newer than the previous
	// read (ERROR_NOT_FOUND).
	UtilMeasured Utilization = iota
	// UtilUnsupported: the board gives no per-process utilization (MIG
	// mode, vGPU, or ERROR_NOT_SUPPORTED). The processes are listed; SmUtil
	// is zero.
	UtilUnsupported
)

// BoardProcesses is one board's listing. Its slices are reused by the
// next [ProcessReader.Read] into the same value.
type BoardProcesses struct {
	// Processes are the listed processes, each pid once (MPS clients
	// included), then the unlisted pids that had samples.
	Processes []ProcessUsage
	// Samples are the utilization samples newer than the reader's
	// previous read of the board, in the order NVML returned them; each
	// is also summed into its process's SmUtil.
	Samples []Sample
	// Utilization says whether SmUtil was measured.
	Utilization Utilization
	// MIG is true when MIG mode is enabled on the board: its processes
	// are those of its MIG devices, and its energy is the board's.
	MIG bool
	// Instances are, under MIG, the board's MIG devices as listed.
	Instances []Instance
	// UnlistedWeight is, under MIG, the weight of the MIG devices whose
	// processes could not be listed: their share of the board's energy,
	// which no listed process may take.
	UnlistedWeight uint64
	// InstanceErrors counts the MIG devices whose listing failed, and
	// InstanceErr is the first such failure.
	InstanceErrors int
	InstanceErr    error
}

// Instance is one MIG device of a board.
type Instance struct {
	// UUID is the MIG device's UUID.
	UUID string
	// Slices is its compute slices (1 for a 1g profile, 7 for 7g); 1
	// when NVML cannot tell.
	Slices uint32
	// Activity is its SM utilization in percent over the time since the
	// previous read, from GPM (GpmMigSampleGet), or -1 where GPM is not
	// supported or this is the first read.
	Activity float64
	// Weight is its share of the board's active energy relative to the
	// other instances': Slices × Activity where Activity is known for
	// every instance of the board, Slices otherwise, in parts per
	// million of a slice.
	Weight uint64
	// Processes is the number of its processes listed; 0 when its
	// listing failed.
	Processes int
	// Failed is true when its listing failed.
	Failed bool
}

// Reset empties b, keeping its storage.
func (b *BoardProcesses) Reset() {
	b.Processes = b.Processes[:0]
	b.Samples = b.Samples[:0]
	b.Instances = b.Instances[:0]
	b.UnlistedWeight, b.InstanceErrors, b.InstanceErr = 0, 0, nil
	b.Utilization = UtilMeasured
	b.MIG = false
}
