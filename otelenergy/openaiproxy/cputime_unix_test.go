//go:build unix

package openaiproxy

import "syscall"

// cpuTime returns the CPU time this process has used, user and system, in
// ns: what a benchmark's work costs, which a loaded machine's waits do
// not inflate as they inflate wall time.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
