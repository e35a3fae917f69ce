//go:build cgo && linux

package nvmlsource

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/otelenergy/otelenergy/internal/source"
)

// config holds what [New] resolves from its options.
type config struct {
	lib nvml.Interface
}

// newConfig applies opts and fills in the defaults.
func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	if c.lib == nil {
		// A private instance rather than go-nvml's package-level one, so
		// this source's Init and Shutdown pair with nobody else's.
		c.lib = nvml.New()
	}
	return c
}

// optionFunc adapts a function to [Option].
type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithInterface makes [New] use lib instead of loading libnvidia-ml.so.1.
// It exists for tests, which pass a go-nvml mock. The default, also used when
// lib is nil, is a fresh nvml.New(). This option exists only in cgo builds on
// Linux.
func WithInterface(lib nvml.Interface) Option {
	return optionFunc(func(c *config) { c.lib = lib })
}

// Source reads the board-level energy counters of the NVIDIA GPUs that NVML
// enumerates. Create one with [New]; a Source must not be copied.
//
// All methods are safe for concurrent use. ReadEnergy and Close serialize on
// a mutex, so Close waits for a read in progress and no read reaches NVML
// after Close.
type Source struct {
	lib     nvml.Interface
	devices []source.Device
	handles []nvml.Device
	skipped []Skipped

	// mu guards closed and lost, and is held across every NVML call made
	// after New, so that Shutdown can never overlap or precede a read.
	mu     sync.Mutex
	closed bool
	// lost[i] is the error that marked devices[i] lost, or nil.
	lost []error
}

var _ source.Source = (*Source)(nil)

// New initializes NVML, enumerates the physical GPUs and probes each one's
// energy counter.
//
// When Init fails, New returns an error wrapping [source.ErrUnavailable] and
// the nvml.Return code, and calls no other NVML function. When Init succeeds
// but no GPU is readable, New calls Shutdown once and returns an error
// wrapping [source.ErrNoDevices] and the reason each GPU was skipped. When
// enumeration itself fails, New calls Shutdown once and returns an error
// wrapping [source.ErrUnavailable].
func New(opts ...Option) (*Source, error) {
	c := newConfig(opts)
	if ret := c.lib.Init(); ret != nvml.SUCCESS {
		// The library may not be loaded: any further NVML call, Shutdown
		// included, could kill the process. See the package doc.
		return nil, fmt.Errorf("%w: %w", source.ErrUnavailable, &returnError{op: "Init", ret: ret})
	}
	s, err := enumerate(c.lib)
	if err != nil {
		if ret := c.lib.Shutdown(); ret != nvml.SUCCESS {
			err = errors.Join(err, &returnError{op: "Shutdown", ret: ret})
		}
		return nil, err
	}
	return s, nil
}

// enumerate builds a Source from an initialized library. It never calls
// Shutdown; New does that when enumerate fails.
func enumerate(lib nvml.Interface) (*Source, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: %w", source.ErrUnavailable, &returnError{op: "DeviceGetCount", ret: ret})
	}
	s := &Source{lib: lib}
	for i := range n {
		d, h, err := probe(lib, i)
		if err != nil {
			s.skipped = append(s.skipped, Skipped{Device: d, Reason: err})
			continue
		}
		s.devices = append(s.devices, d)
		s.handles = append(s.handles, h)
	}
	if len(s.devices) == 0 {
		if len(s.skipped) == 0 {
			return nil, fmt.Errorf("%w: NVML reports no GPUs", source.ErrNoDevices)
		}
		reasons := make([]error, len(s.skipped))
		for j, sk := range s.skipped {
			reasons[j] = fmt.Errorf("GPU %d %s: %w", sk.Device.Index, sk.Device.ID, sk.Reason)
		}
		return nil, fmt.Errorf("%w: %w", source.ErrNoDevices, errors.Join(reasons...))
	}
	s.lost = make([]error, len(s.devices))
	return s, nil
}

// probe describes GPU i and checks that its energy counter answers. The
// returned Device carries whatever was learned even when err is not nil.
func probe(lib nvml.Interface, i int) (source.Device, nvml.Device, error) {
	d := source.Device{Vendor: vendor, Index: i}
	h, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return d, nil, probeError("DeviceGetHandleByIndex", ret)
	}
	if d.ID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return d, nil, probeError("GetUUID", ret)
	}
	if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		return d, nil, probeError("GetName", ret)
	}
	if _, ret = h.GetTotalEnergyConsumption(); ret != nvml.SUCCESS {
		return d, nil, probeError("GetTotalEnergyConsumption", ret)
	}
	return d, h, nil
}

// probeError wraps a failed probe call in the sentinel that says whether the
// GPU lacks the counter, is lost, or failed in some other way.
func probeError(op string, ret nvml.Return) error {
	sentinel := source.ErrRead
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED:
		sentinel = source.ErrNotSupported
	case nvml.ERROR_GPU_IS_LOST:
		sentinel = source.ErrDeviceLost
	}
	return fmt.Errorf("%w: %w", sentinel, &returnError{op: op, ret: ret})
}

// Kind returns "nvml".
func (s *Source) Kind() string { return kind }

// Devices returns the GPUs whose energy counter answered when [New] probed
// them, in NVML index order. The contents never change; the slice is a copy.
func (s *Source) Devices() []source.Device { return slices.Clone(s.devices) }

// Skipped returns the GPUs that [New] found but could not read, with the
// reason for each. The slice is a copy.
func (s *Source) Skipped() []Skipped { return slices.Clone(s.skipped) }

// ReadEnergy returns the raw board-level energy counter of Devices()[i] in
// millijoules, as NVML reports it: it goes backwards when the driver reloads
// or the GPU is reset, and this method passes that through.
//
// Errors: an index outside Devices() yields a plain error; a device that NVML
// reports lost yields an error wrapping [source.ErrDeviceLost], now and on
// every later call, with no further NVML call for that device; any other
// failed read wraps [source.ErrRead]; after Close every call returns an error
// wrapping [source.ErrUnavailable] without calling NVML. Every NVML error
// also matches its nvml.Return with errors.Is.
func (s *Source) ReadEnergy(i int) (uint64, error) {
	if i < 0 || i >= len(s.devices) {
		return 0, fmt.Errorf("nvmlsource: device index %d out of range [0, %d)", i, len(s.devices))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("%w: NVML source closed", source.ErrUnavailable)
	}
	if err := s.lost[i]; err != nil {
		return 0, err
	}
	mj, ret := s.handles[i].GetTotalEnergyConsumption()
	switch ret {
	case nvml.SUCCESS:
		return mj, nil
	case nvml.ERROR_GPU_IS_LOST:
		s.lost[i] = fmt.Errorf("%w: GPU %d %s: %w", source.ErrDeviceLost, i, s.devices[i].ID,
			&returnError{op: "GetTotalEnergyConsumption", ret: ret})
		return 0, s.lost[i]
	default:
		return 0, fmt.Errorf("%w: GPU %d %s: %w", source.ErrRead, i, s.devices[i].ID,
			&returnError{op: "GetTotalEnergyConsumption", ret: ret})
	}
}

// Close shuts NVML down. Only the first call calls Shutdown and can return
// its error; later calls return nil. Close waits for a ReadEnergy in
// progress and is safe to call from any goroutine.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.lib == nil {
		return nil
	}
	s.closed = true
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvmlsource: %w", &returnError{op: "Shutdown", ret: ret})
	}
	return nil
}

// returnError is a failed NVML call. It unwraps to the nvml.Return, so
// errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) matches. Its message never
// calls nvml.Return.Error, which reaches into the library through a
// function pointer that go-nvml swaps unsynchronized on load and unload.
type returnError struct {
	op  string
	ret nvml.Return
}

func (e *returnError) Error() string {
	msg := "nvml " + e.op + ": " + returnName(e.ret) + " (return code " + strconv.Itoa(int(e.ret)) + ")"
	if h := returnHint(e.ret); h != "" {
		msg += ": " + h
	}
	return msg
}

func (e *returnError) Unwrap() error { return e.ret }

// returnName spells an NVML return code as nvml.h names it.
func returnName(r nvml.Return) string {
	switch r {
	case nvml.SUCCESS:
		return "SUCCESS"
	case nvml.ERROR_UNINITIALIZED:
		return "ERROR_UNINITIALIZED"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "ERROR_INVALID_ARGUMENT"
	case nvml.ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case nvml.ERROR_NO_PERMISSION:
		return "ERROR_NO_PERMISSION"
	case nvml.ERROR_ALREADY_INITIALIZED:
		return "ERROR_ALREADY_INITIALIZED"
	case nvml.ERROR_NOT_FOUND:
		return "ERROR_NOT_FOUND"
	case nvml.ERROR_INSUFFICIENT_SIZE:
		return "ERROR_INSUFFICIENT_SIZE"
	case nvml.ERROR_INSUFFICIENT_POWER:
		return "ERROR_INSUFFICIENT_POWER"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED"
	case nvml.ERROR_TIMEOUT:
		return "ERROR_TIMEOUT"
	case nvml.ERROR_IRQ_ISSUE:
		return "ERROR_IRQ_ISSUE"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "ERROR_FUNCTION_NOT_FOUND"
	case nvml.ERROR_CORRUPTED_INFOROM:
		return "ERROR_CORRUPTED_INFOROM"
	case nvml.ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	case nvml.ERROR_RESET_REQUIRED:
		return "ERROR_RESET_REQUIRED"
	case nvml.ERROR_OPERATING_SYSTEM:
		return "ERROR_OPERATING_SYSTEM"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "ERROR_LIB_RM_VERSION_MISMATCH"
	case nvml.ERROR_IN_USE:
		return "ERROR_IN_USE"
	case nvml.ERROR_MEMORY:
		return "ERROR_MEMORY"
	case nvml.ERROR_NO_DATA:
		return "ERROR_NO_DATA"
	case nvml.ERROR_NOT_READY:
		return "ERROR_NOT_READY"
	case nvml.ERROR_GPU_NOT_FOUND:
		return "ERROR_GPU_NOT_FOUND"
	case nvml.ERROR_INVALID_STATE:
		return "ERROR_INVALID_STATE"
	case nvml.ERROR_UNKNOWN:
		return "ERROR_UNKNOWN"
	default:
		return "NVML error"
	}
}

// returnHint says what an Init failure usually means on a real machine.
func returnHint(r nvml.Return) string {
	switch r {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so.1 could not be loaded (no NVIDIA driver, or a container started without the NVIDIA container toolkit)"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "the NVIDIA kernel driver is not loaded"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission to open the NVIDIA device files"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "libnvidia-ml.so.1 and the kernel driver have different versions"
	default:
		return ""
	}
}
