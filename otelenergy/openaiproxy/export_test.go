package openaiproxy

// CPUTime is cpuTime, for the benchmarks of package openaiproxy_test.
var CPUTime = cpuTime
