// Package doctor checks a node before its energy figures are trusted: what
// an operator runs first on a GPU node, as `otelenergy-agent doctor` (or
// the proxy's). It prints one line per finding and, under each failure,
// one line that says how to fix it.
//
// # What it checks
//
//   - NVML: that it loads, the driver's and NVML's versions.
//   - GPU selection: which boards CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES
//     or -devices choose, read as the agent and CUDA read them.
//   - Per chosen board: whether the energy counter answers, its update
//     period measured over -window, whether the power it implies agrees
//     with GetPowerUsage, the power-limit constraints, MIG mode, whether
//     processes can be listed (ERROR_NO_PERMISSION) and whether
//     GetProcessUtilization is supported, and whether every listed pid is
//     visible under -proc-root (the host's PID namespace).
//   - The other sources: AMD SMI, Intel hwmon and the host's RAPL domains
//     (and psys), each found, absent (ok: nothing to meter) or refused
//     (a warning naming the grant that is missing), and each device
//     left out, with the reason.
//   - The metrics exporter the OTEL_* variables configure: whether the
//     OTLP endpoint answers, or whether a Prometheus endpoint can be
//     scraped from other hosts.
//
// # Guarantees
//
// After a failed nvml.Init no other NVML function is called (go-nvml kills
// the process on such a call when the library is absent). A failure makes
// [Main] return 1; warnings do not. Network checks go only to the
// configured endpoint, with a 3 s timeout.
package doctor
