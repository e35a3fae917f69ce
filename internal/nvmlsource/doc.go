// Package nvmlsource reads the cumulative energy counters of NVIDIA GPUs
// through NVML (libnvidia-ml.so.1, loaded at run time by go-nvml) and offers
// them as a [source.Source].
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
// [New] probes each GPU once: it fetches the handle, UUID and name, and reads
// the energy counter. A GPU that fails any of these, for example one that
// answers ERROR_NOT_SUPPORTED because it predates Volta or is a vGPU without
// the counter, is left out of [Source.Devices] and reported by
// [Source.Skipped] with a reason wrapping [source.ErrNotSupported],
// [source.ErrDeviceLost] or [source.ErrRead]. When no GPU is readable, New
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
// fails after Init, or by the first [Source.Close]. Close serializes with
// ReadEnergy, so no NVML call can run during or after Shutdown.
package nvmlsource
