package proctree

// Set is a set of processes whose members change as processes start and
// exit, such as a server's process tree: the attributed processes of a
// source that lists a GPU's processes (package nvmlsource) are those of
// the set as it stands at each listing.
type Set interface {
	// AppendPIDs appends the set's members, as they stand at the call,
	// each once, to dst and returns the extended slice. The pids are in
	// the numbering of the proc file system the set reads. It may read
	// /proc, so callers call it from goroutines of their own, never on a
	// request path; it must be safe for concurrent use.
	AppendPIDs(dst []int) []int
}
