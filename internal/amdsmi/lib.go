package amdsmi

import "strconv"

// Status is an amdsmi_status_t (amd_smi/amdsmi.h). It is an error; the
// zero value, StatusSuccess, is never returned as one.
type Status uint32

// The status codes this package tells apart; the values are amdsmi.h's and
// have been the same from ROCm 6.1 to 7.
const (
	StatusSuccess         Status = 0  // AMDSMI_STATUS_SUCCESS
	StatusInval           Status = 1  // AMDSMI_STATUS_INVAL
	StatusNotSupported    Status = 2  // AMDSMI_STATUS_NOT_SUPPORTED
	StatusFailLoadModule  Status = 4  // AMDSMI_STATUS_FAIL_LOAD_MODULE
	StatusNoPerm          Status = 10 // AMDSMI_STATUS_NO_PERM
	StatusOutOfResources  Status = 15 // AMDSMI_STATUS_OUT_OF_RESOURCES
	StatusInitError       Status = 18 // AMDSMI_STATUS_INIT_ERROR
	StatusNotFound        Status = 31 // AMDSMI_STATUS_NOT_FOUND
	StatusNotInit         Status = 32 // AMDSMI_STATUS_NOT_INIT
	StatusDriverNotLoaded Status = 34 // AMDSMI_STATUS_DRIVER_NOT_LOADED
	StatusNoData          Status = 40 // AMDSMI_STATUS_NO_DATA
)

func (s Status) Error() string {
	name := map[Status]string{
		StatusSuccess: "AMDSMI_STATUS_SUCCESS", StatusInval: "AMDSMI_STATUS_INVAL",
		StatusNotSupported: "AMDSMI_STATUS_NOT_SUPPORTED", StatusFailLoadModule: "AMDSMI_STATUS_FAIL_LOAD_MODULE",
		StatusNoPerm: "AMDSMI_STATUS_NO_PERM", StatusOutOfResources: "AMDSMI_STATUS_OUT_OF_RESOURCES",
		StatusInitError: "AMDSMI_STATUS_INIT_ERROR", StatusNotFound: "AMDSMI_STATUS_NOT_FOUND",
		StatusNotInit: "AMDSMI_STATUS_NOT_INIT", StatusDriverNotLoaded: "AMDSMI_STATUS_DRIVER_NOT_LOADED",
		StatusNoData: "AMDSMI_STATUS_NO_DATA",
	}[s]
	if name == "" {
		name = "AMDSMI_STATUS"
	}
	return name + " (" + strconv.FormatUint(uint64(s), 10) + ")"
}

// Handle is an amdsmi_socket_handle or amdsmi_processor_handle: an opaque
// pointer the library owns.
type Handle uintptr

// Version is the AMD SMI library's version, as amdsmi_get_lib_version
// gives it: 24.7.x for ROCm 6.3 (the amd_smi_lib CMakeLists of that
// release), 26.x for ROCm 7.
type Version struct {
	Major, Minor, Release uint32
}

func (v Version) String() string {
	return strconv.FormatUint(uint64(v.Major), 10) + "." + strconv.FormatUint(uint64(v.Minor), 10) + "." + strconv.FormatUint(uint64(v.Release), 10)
}

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Release < w.Release
}

// MinVersion is the oldest AMD SMI library whose energy counter is
// trusted: the one of ROCm 6.3. Before it, amdsmi_get_energy_count was
// wrong on some boards (Zeus checks every board against its power for
// that reason).
var MinVersion = Version{Major: 24, Minor: 7}

// Process is one process on a GPU as amdsmi_get_gpu_process_list lists
// it (amdsmi_proc_info_t's pid and engine_usage.gfx).
type Process struct {
	// Pid is in the host's PID namespace.
	Pid uint32
	// GfxNs is the time the process has used the graphics (compute)
	// engine, in ns, cumulative.
	GfxNs uint64
}

// Lib is the part of AMD SMI this package uses, one method per C call
// (or per fact read). The real one is loaded at run time by [Open]; tests
// use package amdsmitest's fake. Every method is safe for concurrent use
// after Init, as AMD SMI's calls are.
type Lib interface {
	// Init is amdsmi_init(AMDSMI_INIT_AMD_GPUS).
	Init() Status
	// ShutDown is amdsmi_shut_down.
	ShutDown() Status
	// LibVersion is amdsmi_get_lib_version.
	LibVersion() (Version, Status)
	// Sockets is amdsmi_get_socket_handles.
	Sockets() ([]Handle, Status)
	// Processors is amdsmi_get_processor_handles of one socket.
	Processors(socket Handle) ([]Handle, Status)
	// UUID is amdsmi_get_gpu_device_uuid.
	UUID(h Handle) (string, Status)
	// MarketName is amdsmi_get_gpu_asic_info's market_name.
	MarketName(h Handle) (string, Status)
	// EnergyCount is amdsmi_get_energy_count: the accumulator, its
	// resolution in µJ per count, and the counter's own timestamp in ns.
	EnergyCount(h Handle) (acc uint64, resolution float32, timestampNs uint64, st Status)
	// PowerWatts is the board's average power, as the driver reports it.
	PowerWatts(h Handle) (float64, Status)
	// Processes is amdsmi_get_gpu_process_list, into buf's storage.
	Processes(h Handle, buf []Process) ([]Process, Status)
}
