// Package amdsmi reads the energy counters of AMD Instinct GPUs through
// AMD SMI (libamd_smi.so, ROCm), loaded at run time with
// github.com/ebitengine/purego: no cgo, and no ROCm at build time. It
// offers them as a [source.Source], a [source.Skipper] and a
// [source.Sharer].
//
// The C API used is ROCm/amdsmi's include/amd_smi/amdsmi.h: amdsmi_init
// with AMDSMI_INIT_AMD_GPUS (1 << 1), amdsmi_get_lib_version,
// amdsmi_get_socket_handles, amdsmi_get_processor_handles,
// amdsmi_get_gpu_device_uuid, amdsmi_get_gpu_asic_info (market_name),
// amdsmi_get_gpu_device_bdf, amdsmi_get_gpu_process_list and
//
//	amdsmi_status_t amdsmi_get_energy_count(amdsmi_processor_handle h,
//	        uint64_t *energy_accumulator, float *counter_resolution,
//	        uint64_t *timestamp);
//
// whose energy in µJ is accumulator × resolution and whose timestamp is in
// ns. Every function is resolved when the library is loaded ([Open]), so
// a missing one is an error before any call, never a crash. The real
// library is not exercised by this package's tests, which run on
// [amdsmitest.Node]; see "Unverified" below.
//
// # Versions
//
// Before ROCm 6.3 (AMD SMI library 24.7, as the amd_smi_lib CMakeLists of
// that release numbers it) the counter was wrong on some boards, so [New]
// refuses an older library with [ErrOldROCm]. Structures whose layout
// changed between releases are read by version: amdsmi_version_t (a year
// field first up to 24.x), amdsmi_proc_info_t (name[32] up to 24.x,
// name[256] in 26.x; on any other major version processes are not listed
// and boards count as shared). amdsmi_power_info_t changed too and is not
// used: the power for the start check comes from the driver's hwmon
// (power1_average or power1_input) at the board's PCI address.
//
// # One device per package, and the start check
//
// Energy is a property of the package. AMD SMI lists processors by
// socket; [New] meters the first processor of each socket whose counter
// answers and leaves the others out with [ErrSamePackage]: the second die
// of an MI250/MI250X, which reports no energy (its package's energy is
// reported by the first), and the partitions of an MI300X in a compute
// partition mode, whose energy is the socket's. Then, as Zeus does, it
// reads every counter, waits 0.5 s, reads again and compares the
// counter's power with the driver's: a counter that did not move (a
// non-reporting die listed under a socket of its own) or that is more
// than ten times off either way is left out with [ErrImplausible]. The
// counter is not supported in VM guests (NOT_SUPPORTED: left out with
// source.ErrNotSupported).
//
// # Readings
//
// [Source.ReadEnergy] returns ⌊accumulator × resolution / 1000⌋ mJ,
// computed exactly ([MicrojoulesToMJ]). Which drop of the accumulator is a
// wrap is package tracker's rule, decided by a tracker per board: from the
// top quarter of its 64-bit range to the bottom quarter; it is unwrapped.
// Any other drop (a driver reload, a GPU reset) is passed on as a drop,
// which the Monitor's tracker classes as a reset or jitter. NOT_FOUND and
// DRIVER_NOT_LOADED mark the board lost (source.ErrDeviceLost), and it is
// not called again. [Source.ReadEnergyStamped] also returns the counter's
// own timestamp.
//
// # Shared boards
//
// Every 5 s a goroutine lists each board's processes
// (amdsmi_get_gpu_process_list) and [Source.Share] returns the latest
// share: the attributed processes' ([WithProcesses], this process by
// default) part of the graphics engine time used since the previous
// listing, as Kepler splits NVIDIA boards by SM utilization. A board with
// only attributed processes, or none, is exclusive; one with none of them,
// whose listing failed, or whose attributed processes used none of the
// engine while others did, is shared and not split, so its requests are
// marked approximate: the one rule of every GPU source (package source's
// ShareOf), never a confident zero. Pids are the host's. Where this process sees the
// host's pids, a listed process that descends from an attributed one
// within 8 generations (/proc/<pid>/stat, package proctree) is attributed
// too, as on NVIDIA: vLLM's workers are the server's work. In a PID
// namespace of its own, this process's pid cannot be compared with AMD
// SMI's, and a board with any process is shared and not split; name the
// host pids with [WithProcesses].
//
// # Unverified
//
// Without an AMD GPU here, these are taken from amdsmi.h and peers'
// code, not observed: the struct layouts above, that the energy
// timestamp is on a clock that advances with real time, which statuses a
// lost board returns, and how MI250 dies and MI300X partitions are
// grouped under sockets.
package amdsmi
