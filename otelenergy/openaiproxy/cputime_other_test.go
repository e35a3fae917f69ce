//go:build !unix

package openaiproxy

// cpuTime is not measured here.
func cpuTime() int64 { return 0 }
