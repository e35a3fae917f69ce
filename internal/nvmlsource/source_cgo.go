//go:build cgo && linux

package nvmlsource

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/internal/proctree"
	"github.com/otelenergy/otelenergy/internal/source"
)

// config holds what [New] resolves from its options.
type config struct {
	lib nvml.Interface
	// devices are the ids of WithDevices; empty means the environment's
	// choice.
	devices []string
	// pids are the attributed processes; empty means this process.
	pids []int
	// explicitPIDs reports whether pids came from WithProcesses or a
	// set, which give them in the host's numbering, so that they always
	// compare with NVML's.
	explicitPIDs bool
	// set, when not nil, adds its members at each listing.
	set proctree.Set
	// lookupEnv reads the environment; a test seam.
	lookupEnv func(string) (string, bool)
	// shareInterval is the period of the process listing; zero or less
	// starts no goroutine, and shares change only on refreshShares.
	shareInterval time.Duration
	// hostPIDs reports whether this process's pids are in the namespace
	// NVML reports pids in; a test seam.
	hostPIDs func() bool
	// now times a run of failed listings; a test seam.
	now func() time.Time
	// clock reads the monotonic and the wall clock at once for the
	// utilization samples' cursors; a test seam.
	clock func() (mono time.Duration, wall time.Time)
	// procRoot is where the process tree is read, "/proc"; a test seam.
	procRoot string
}

// newConfig applies opts and fills in the defaults.
func newConfig(opts []Option) config {
	c := config{
		lookupEnv:     os.LookupEnv,
		shareInterval: defaultShareInterval,
		hostPIDs:      proctree.InHostPIDNamespace,
		now:           time.Now,
		clock:         monoWall(time.Now()),
		procRoot:      "/proc",
	}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.lib == nil {
		// A private instance rather than go-nvml's package-level one, so
		// this source's Init and Shutdown pair with nobody else's.
		c.lib = nvml.New()
	}
	c.explicitPIDs = len(c.pids) > 0 || c.set != nil
	if !c.explicitPIDs {
		c.pids = []int{os.Getpid()}
	}
	return c
}

// WithInterface makes [New] use lib instead of loading libnvidia-ml.so.1.
// It exists for tests, which pass a go-nvml mock. The default, also used when
// lib is nil, is a fresh nvml.New(). This option exists only in cgo builds on
// Linux.
func WithInterface(lib nvml.Interface) Option {
	return optionFunc(func(c *config) { c.lib = lib })
}

// Source reads the board-level energy counters of the NVIDIA GPUs this
// process uses, and tracks which processes share them. Create one with
// [New]; a Source must not be copied.
//
// All methods are safe for concurrent use. NVML is thread-safe, so
// ReadEnergy and the process listing call it concurrently: a reading never
// waits for a listing's calls. Close waits for the calls in progress, and
// no call reaches NVML after Close.
type Source struct {
	lib     nvml.Interface
	devices []source.Device
	handles []nvml.Device
	skipped []Skipped

	// mu is held for reading across every NVML call made after New, and
	// for writing by Close while it sets closed and calls Shutdown, so that
	// calls run side by side but none overlaps or follows Shutdown. Close
	// stops the listing goroutine before it asks for the write side, so a
	// pending Close never holds a reading back behind a listing call.
	mu sync.RWMutex
	// closed is written under mu's write side.
	closed bool
	// lost[i] holds the error that marked devices[i] lost, or nil. It is
	// atomic because ReadEnergy sets it under mu's read side while the
	// listing reads it.
	lost []atomic.Pointer[error]

	sharing
}

var (
	_ source.Source  = (*Source)(nil)
	_ source.Skipper = (*Source)(nil)
	_ source.Sharer  = (*Source)(nil)
)

// New initializes NVML, chooses the GPUs this process uses (see the package
// doc), probes each one's energy counter, lists the processes on them, and
// starts the goroutine that keeps that listing current.
//
// When Init fails, New returns an error wrapping [source.ErrUnavailable] and
// the nvml.Return code, and calls no other NVML function. Otherwise, on any
// failure New calls Shutdown once and returns an error that wraps:
// [source.ErrNotVisible] when a [WithDevices] id matches no GPU;
// [source.ErrNoDevices] and [source.ErrNotVisible] when the environment
// leaves no GPU; [source.ErrNoDevices] and each GPU's reason when no chosen
// GPU is readable; [source.ErrUnavailable] when enumeration itself fails.
//
// When New succeeds but leaves out a chosen GPU (no counter, a failed
// probe) or meets an invalid entry in CUDA_VISIBLE_DEVICES or
// NVIDIA_VISIBLE_DEVICES, it reports that once through otel.Handle, as one
// joined error. GPUs that are merely not chosen are listed by
// [Source.Skipped] and not reported.
func New(opts ...Option) (*Source, error) {
	c := newConfig(opts)
	if ret := c.lib.Init(); ret != nvml.SUCCESS {
		// The library may not be loaded: any further NVML call, Shutdown
		// included, could kill the process. See the package doc.
		return nil, fmt.Errorf("%w: %w", source.ErrUnavailable, &returnError{op: "Init", ret: ret})
	}
	s, notes, err := enumerate(c)
	if err != nil {
		if ret := c.lib.Shutdown(); ret != nvml.SUCCESS {
			err = errors.Join(err, &returnError{op: "Shutdown", ret: ret})
		}
		return nil, err
	}
	for _, sk := range s.skipped {
		if !errors.Is(sk.Reason, source.ErrNotVisible) {
			notes = append(notes, fmt.Errorf("GPU %d %s left out: %w", sk.Device.Index, sk.Device.ID, sk.Reason))
		}
	}
	if len(notes) > 0 {
		otel.Handle(fmt.Errorf("nvmlsource: %w", errors.Join(notes...)))
	}
	s.startSharing(c)
	return s, nil
}

// enumerate builds a Source from an initialized library, and returns the
// problems New reports when it succeeds. It never calls Shutdown; New does
// that when enumerate fails.
func enumerate(c config) (*Source, []error, error) {
	lib := c.lib
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("%w: %w", source.ErrUnavailable, &returnError{op: "DeviceGetCount", ret: ret})
	}
	if n == 0 {
		return nil, nil, fmt.Errorf("%w: NVML reports no GPUs", source.ErrNoDevices)
	}
	r := &resolver{lib: lib, boards: make([]board, n)}
	for i := range r.boards {
		r.boards[i] = identify(lib, i)
	}
	sel, err := choose(r, c.devices, c.lookupEnv)
	if err != nil {
		return nil, nil, err
	}
	if !slices.Contains(sel.meter, true) {
		return nil, nil, r.noneChosen(sel)
	}

	s := &Source{lib: lib}
	for i, b := range r.boards {
		d := source.Device{Vendor: vendor, Index: i, Type: "gpu", ID: b.uuid}
		switch {
		case b.err != nil:
			// Whether it was chosen cannot be told without its UUID, so
			// its own failure is the reason given.
			s.skipped = append(s.skipped, Skipped{Device: d, Reason: b.err})
		case !sel.meter[i]:
			s.skipped = append(s.skipped, Skipped{Device: d, Reason: fmt.Errorf("%w: %s", source.ErrNotVisible, sel.why)})
		default:
			if d, err = probe(b.handle, d); err != nil {
				s.skipped = append(s.skipped, Skipped{Device: d, Reason: err})
				continue
			}
			s.devices = append(s.devices, d)
			s.handles = append(s.handles, b.handle)
		}
	}
	if len(s.devices) == 0 {
		var reasons []error
		for _, sk := range s.skipped {
			if sel.meter[sk.Device.Index] || sk.Device.ID == "" {
				reasons = append(reasons, fmt.Errorf("GPU %d %s: %w", sk.Device.Index, sk.Device.ID, sk.Reason))
			}
		}
		return nil, nil, fmt.Errorf("%w: %w", source.ErrNoDevices, errors.Join(reasons...))
	}
	s.lost = make([]atomic.Pointer[error], len(s.devices))
	return s, sel.notes, nil
}

// identify fetches GPU i's handle and UUID, which choosing it needs.
func identify(lib nvml.Interface, i int) board {
	h, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return board{err: probeError("DeviceGetHandleByIndex", ret)}
	}
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		return board{err: probeError("GetUUID", ret)}
	}
	return board{handle: h, uuid: uuid}
}

// probe completes d from its handle and checks that its energy counter
// answers. The returned Device carries whatever was learned even when err
// is not nil.
func probe(h nvml.Device, d source.Device) (source.Device, error) {
	var ret nvml.Return
	if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		return d, probeError("GetName", ret)
	}
	if _, ret = h.GetTotalEnergyConsumption(); ret != nvml.SUCCESS {
		return d, probeError("GetTotalEnergyConsumption", ret)
	}
	d.MaxWatts, d.MaxWattsFirm = maxWatts(h)
	return d, nil
}

// maxWatts bounds what the board can draw: the most its power limit can be
// set to (GetPowerManagementLimitConstraints), times powerMargin. The limit
// in force now is no bound, because an administrator or a DCGM policy can
// raise it at any time without this process knowing. The enforced limit is
// used where it is the higher, or where the constraints do not answer.
// It returns 0, which leaves the sampler's default bound, where neither
// answers. The bound is firm when it comes from the constraints: no one can
// set the limit above their maximum, so a run of readings above it is a
// misreading, not a bound to learn. One from the enforced limit is not.
func maxWatts(h nvml.Device) (watts float64, firm bool) {
	var mw uint32
	if _, hi, ret := h.GetPowerManagementLimitConstraints(); ret == nvml.SUCCESS && hi > 0 {
		mw, firm = hi, true
	}
	if lim, ret := h.GetEnforcedPowerLimit(); ret == nvml.SUCCESS && lim > mw {
		// A limit in force above the most it can be set to: the
		// constraints are wrong, and the bound is only an estimate.
		mw, firm = lim, false
	}
	return float64(mw) / 1000 * powerMargin, firm
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

// Devices returns the chosen GPUs whose energy counter answered when [New]
// probed them, in NVML index order. The contents never change; the slice is
// a copy.
func (s *Source) Devices() []source.Device { return slices.Clone(s.devices) }

// Skipped returns the GPUs that [New] found but does not meter, in NVML
// index order, with the reason for each: [source.ErrNotVisible] for a GPU
// not chosen, [source.ErrNotSupported] for one without an energy counter,
// [source.ErrDeviceLost] or [source.ErrRead] for a failed probe. The
// contents never change; the slice is a copy.
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
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, fmt.Errorf("%w: NVML source closed", source.ErrUnavailable)
	}
	if err := s.lost[i].Load(); err != nil {
		return 0, *err
	}
	mj, ret := s.handles[i].GetTotalEnergyConsumption()
	switch ret {
	case nvml.SUCCESS:
		return mj, nil
	case nvml.ERROR_GPU_IS_LOST:
		err := fmt.Errorf("%w: GPU %d %s: %w", source.ErrDeviceLost, i, s.devices[i].ID,
			&returnError{op: "GetTotalEnergyConsumption", ret: ret})
		s.lost[i].Store(&err)
		return 0, err
	default:
		return 0, fmt.Errorf("%w: GPU %d %s: %w", source.ErrRead, i, s.devices[i].ID,
			&returnError{op: "GetTotalEnergyConsumption", ret: ret})
	}
}

// Close stops the process listing, waits for it to end, and shuts NVML
// down. Only the first call calls Shutdown and can return its error; later
// calls return nil. Close waits for the NVML calls in progress (a
// ReadEnergy, a listing) and is safe to call from any goroutine.
func (s *Source) Close() error {
	s.stopSharing()
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
