//go:build linux && (amd64 || arm64)

package amdsmi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/internal/sysfscounter"
)

// libNames are tried in order by [Open]: the loader's search path first
// (LD_LIBRARY_PATH, ld.so.cache), then ROCm's default prefix.
var libNames = []string{"libamd_smi.so", "/opt/rocm/lib/libamd_smi.so"}

// initAMDGPUs is AMDSMI_INIT_AMD_GPUS (amdsmi_init_flags_t, 1 << 1).
const initAMDGPUs = 1 << 1

// Layouts of amdsmi_proc_info_t, which changed when AMDSMI_MAX_STRING_LENGTH
// grew from 32 (name[AMDSMI_NORMAL_STRING_LENGTH], library 24.x, ROCm 6.1
// to 6.3) to 256 (library 26.x, ROCm 7): the entry's size and the offsets
// of pid and engine_usage.gfx.
type procLayout struct{ size, pid, gfx uintptr }

var (
	procLayout24 = procLayout{size: 224, pid: 32, gfx: 48}
	procLayout26 = procLayout{size: 704, pid: 256, gfx: 272}
)

// lib calls libamd_smi.so through purego; see [Lib] for each method.
type lib struct {
	h                                                        uintptr
	init, shutDown, version, sockets, processors, uuid, asic uintptr
	energy, bdf, procList                                    uintptr
	layout                                                   *procLayout
	sysfs                                                    string

	// energyMu guards the energy call's out-parameters, which live on
	// the heap so that no Go stack move can strand a pointer C holds.
	energyMu sync.Mutex
	e        *energyOut
}

type energyOut struct {
	acc, ts uint64
	res     float32
	args    [4]uintptr
}

var _ Lib = (*lib)(nil)

// Open loads libamd_smi.so and resolves every function this package
// calls. It fails with an error wrapping [source.ErrUnavailable] when the
// library or a function is missing; it calls nothing.
func Open() (Lib, error) {
	var h uintptr
	var errs []error
	for _, name := range libNames {
		var err error
		if h, err = purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL); err == nil {
			break
		}
		errs = append(errs, err)
	}
	if h == 0 {
		return nil, fmt.Errorf("%w: amdsmi: libamd_smi.so could not be loaded (ROCm's AMD SMI is not installed, or not on the loader's path): %w",
			source.ErrUnavailable, errors.Join(errs...))
	}
	l := &lib{h: h, e: new(energyOut), sysfs: "/sys"}
	for _, f := range []struct {
		p    *uintptr
		name string
	}{
		{&l.init, "amdsmi_init"}, {&l.shutDown, "amdsmi_shut_down"},
		{&l.version, "amdsmi_get_lib_version"}, {&l.sockets, "amdsmi_get_socket_handles"},
		{&l.processors, "amdsmi_get_processor_handles"}, {&l.uuid, "amdsmi_get_gpu_device_uuid"},
		{&l.asic, "amdsmi_get_gpu_asic_info"}, {&l.energy, "amdsmi_get_energy_count"},
		{&l.bdf, "amdsmi_get_gpu_device_bdf"}, {&l.procList, "amdsmi_get_gpu_process_list"},
	} {
		sym, err := purego.Dlsym(h, f.name)
		if err != nil {
			purego.Dlclose(h)
			return nil, fmt.Errorf("%w: amdsmi: %s missing from libamd_smi.so: %w", source.ErrUnavailable, f.name, err)
		}
		*f.p = sym
	}
	return l, nil
}

func call(fn uintptr, args ...uintptr) Status {
	r, _, _ := purego.SyscallN(fn, args...)
	return Status(uint32(r))
}

func (l *lib) Init() Status     { return call(l.init, initAMDGPUs) }
func (l *lib) ShutDown() Status { return call(l.shutDown) }

// LibVersion decodes amdsmi_version_t, whose layout changed: library 24.x
// has {year, major, minor, release, build} (ROCm 6.3: 24, 7, 0, ...), 26.x
// {major, minor, release, build}. A first word of 24 or less is the old
// layout's year, and the version is year.major.minor.
func (l *lib) LibVersion() (Version, Status) {
	buf := make([]byte, 64)
	st := call(l.version, uintptr(unsafe.Pointer(&buf[0])))
	runtime.KeepAlive(buf)
	if st != StatusSuccess {
		return Version{}, st
	}
	w := func(i int) uint32 { return binary.NativeEndian.Uint32(buf[4*i:]) }
	v := Version{Major: w(0), Minor: w(1), Release: w(2)}
	switch {
	case v.Major <= 24:
		l.layout = &procLayout24
	case v.Major >= 26:
		l.layout = &procLayout26
	}
	return v, StatusSuccess
}

func (l *lib) handles(fn uintptr, pre ...uintptr) ([]Handle, Status) {
	n := new(uint32)
	st := call(fn, append(pre, uintptr(unsafe.Pointer(n)), 0)...)
	if st != StatusSuccess || *n == 0 {
		return nil, st
	}
	out := make([]Handle, *n)
	st = call(fn, append(pre, uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(&out[0])))...)
	runtime.KeepAlive(out)
	runtime.KeepAlive(n)
	if st != StatusSuccess {
		return nil, st
	}
	return out[:min(int(*n), len(out))], StatusSuccess
}

func (l *lib) Sockets() ([]Handle, Status) { return l.handles(l.sockets) }

func (l *lib) Processors(s Handle) ([]Handle, Status) { return l.handles(l.processors, uintptr(s)) }

func (l *lib) UUID(h Handle) (string, Status) {
	buf := make([]byte, 64)
	n := new(uint32)
	*n = uint32(len(buf))
	st := call(l.uuid, uintptr(h), uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(&buf[0])))
	runtime.KeepAlive(buf)
	runtime.KeepAlive(n)
	return cString(buf), st
}

// MarketName reads amdsmi_asic_info_t into a buffer larger than any of
// its versions; market_name is its first field in all of them (256 bytes
// since ROCm 6.2).
func (l *lib) MarketName(h Handle) (string, Status) {
	buf := make([]byte, 8192)
	st := call(l.asic, uintptr(h), uintptr(unsafe.Pointer(&buf[0])))
	runtime.KeepAlive(buf)
	return cString(buf[:256]), st
}

func (l *lib) EnergyCount(h Handle) (uint64, float32, uint64, Status) {
	l.energyMu.Lock()
	defer l.energyMu.Unlock()
	e := l.e
	// The arguments live in a heap array reused across calls: a variadic
	// slice built here would escape into purego and allocate per read.
	e.args = [4]uintptr{uintptr(h), uintptr(unsafe.Pointer(&e.acc)), uintptr(unsafe.Pointer(&e.res)), uintptr(unsafe.Pointer(&e.ts))}
	r, _, _ := purego.SyscallN(l.energy, e.args[:]...)
	return e.acc, e.res, e.ts, Status(uint32(r))
}

// PowerWatts reads the driver's average power from hwmon (power1_average,
// or power1_input where the driver shows only that, as on MI300), found
// through the board's PCI address (amdsmi_get_gpu_device_bdf, a uint64
// union of function:3, device:5, bus:8, domain:48). amdsmi_power_info_t
// is not used: its layout changed between ROCm 6.3 and 7.
func (l *lib) PowerWatts(h Handle) (float64, Status) {
	bdf := new(uint64)
	if st := call(l.bdf, uintptr(h), uintptr(unsafe.Pointer(bdf))); st != StatusSuccess {
		return 0, st
	}
	b := *bdf
	addr := fmt.Sprintf("%04x:%02x:%02x.%d", b>>16, (b>>8)&0xff, (b>>3)&0x1f, b&0x7)
	hws, _ := filepath.Glob(filepath.Join(l.sysfs, "bus/pci/devices", addr, "hwmon/hwmon*"))
	for _, hw := range hws {
		for _, f := range []string{"power1_average", "power1_input"} {
			if uw, err := sysfscounter.ReadUint(os.Open, filepath.Join(hw, f)); err == nil {
				return float64(uw) / 1e6, StatusSuccess
			}
		}
	}
	return 0, StatusNotSupported
}

func (l *lib) Processes(h Handle, buf []Process) ([]Process, Status) {
	if l.layout == nil {
		return buf[:0], StatusNotSupported // a layout this package does not know
	}
	lay := *l.layout
	for cap := 16; ; cap *= 4 {
		raw := make([]byte, uintptr(cap)*lay.size)
		n := new(uint32)
		*n = uint32(cap)
		st := call(l.procList, uintptr(h), uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(&raw[0])))
		runtime.KeepAlive(raw)
		if st == StatusOutOfResources && cap < 4096 {
			continue // the list is longer than raw; *n says how long
		}
		if st != StatusSuccess {
			return buf[:0], st
		}
		buf = buf[:0]
		for i := range min(int(*n), cap) {
			e := raw[uintptr(i)*lay.size:]
			buf = append(buf, Process{
				Pid:   binary.NativeEndian.Uint32(e[lay.pid:]),
				GfxNs: binary.NativeEndian.Uint64(e[lay.gfx:]),
			})
		}
		return buf, StatusSuccess
	}
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}
