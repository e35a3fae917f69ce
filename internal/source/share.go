package source

// UnknownShare returns the share of a device whose processes are not
// known (no listing yet, a failed listing): Processes −1, Shared, not
// Split. Its energy is charged whole to the requests, which are flagged
// shared and approximate. It is the one spelling of "unknown share" for
// every source.
func UnknownShare() Share { return Share{Processes: -1, Shared: true} }

// Listing is one look at the processes on a device, as [ShareOf] takes
// it: every GPU source lists a board's processes and measures, per
// process, how much of the board each used since its previous look (SM
// utilization for NVML, graphics-engine time for AMD SMI).
type Listing struct {
	// Processes is the number of distinct processes listed, and Mine how
	// many of them are attributed (directly or as descendants).
	Processes, Mine int
	// Comparable is false when the attributed pids are in another PID
	// namespace than the listing's (this process's own pid inside a
	// container), so that Mine means nothing.
	Comparable bool
	// Measured is true when UsedAll and UsedMine measure the processes'
	// use since the previous look: false on a first look, or where the
	// device gives no per-process use (vGPU, NOT_SUPPORTED).
	Measured bool
	// UsedAll is every listed process's use, UsedMine the attributed
	// ones', in any one unit.
	UsedAll, UsedMine uint64
}

// ShareOf is the one rule by which a GPU source turns a listing into the
// attributed processes' [Share]. The device is exclusive (Split, Fraction
// 1) only when the listing proves it; a share of 0 is never reported,
// since a confident zero is more often a wrong pid, a child whose
// ancestry cannot be read or an MPS server holding the work than a
// device doing nothing for them:
//
//   - no process: exclusive, Fraction 1;
//   - pids not comparable: Shared, not Split;
//   - only attributed processes: exclusive, Fraction 1;
//   - none attributed: Shared, not Split;
//   - use not measured: Shared, not Split;
//   - nobody used the device: Shared, Split evenly by count;
//   - the attributed processes used none of it while others worked:
//     Shared, not Split;
//   - otherwise Shared, Split by use: UsedMine / UsedAll.
//
// Layouts a source knows more of (MIG, where an empty parent listing
// proves nothing) are decided by the source before it asks.
func ShareOf(l Listing) Share {
	n := l.Processes
	switch {
	case n <= 0:
		return Share{Processes: 0, Split: true, Fraction: 1}
	case !l.Comparable:
		return Share{Processes: n, Shared: true}
	case l.Mine >= n:
		return Share{Processes: n, Split: true, Fraction: 1}
	case l.Mine <= 0, !l.Measured:
		return Share{Processes: n, Shared: true}
	case l.UsedAll == 0:
		return Share{Processes: n, Shared: true, Split: true, Fraction: float64(l.Mine) / float64(n)}
	case l.UsedMine == 0:
		return Share{Processes: n, Shared: true}
	default:
		return Share{Processes: n, Shared: true, Split: true, Fraction: float64(min(l.UsedMine, l.UsedAll)) / float64(l.UsedAll)}
	}
}
