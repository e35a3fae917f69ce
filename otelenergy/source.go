package otelenergy

import (
	"fmt"
	"math"
	"sync"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
)

// Source reads cumulative energy counters; see the interface's methods for
// its contract. [NewNVMLSource] and [NewFuncSource] build the library's
// own; package simgpu has a simulated one. A Monitor takes ownership of its
// Source and closes it on Shutdown.
type Source = source.Source

// Device describes one energy-metered device.
type Device = source.Device

// Skipped is a device a Source found but does not read, and why; see
// [Monitor.Stats].
type Skipped = source.Skipped

// Sentinel errors from sources. Match them with errors.Is.
var (
	// ErrUnavailable: the source cannot be used on this machine.
	ErrUnavailable = source.ErrUnavailable
	// ErrNotSupported: a device has no energy counter.
	ErrNotSupported = source.ErrNotSupported
	// ErrDeviceLost: a device stopped answering and is not read again.
	ErrDeviceLost = source.ErrDeviceLost
	// ErrRead: one read failed; the next good one covers the gap.
	ErrRead = source.ErrRead
	// ErrNoDevices: the source found no device it can read.
	ErrNoDevices = source.ErrNoDevices
	// ErrNotVisible: a device this process cannot use was left out.
	ErrNotVisible = source.ErrNotVisible
)

// NewNVMLSource returns a source that reads the GetTotalEnergyConsumption
// counter of the NVIDIA GPUs this process uses, through NVML.
//
// It fails with an error wrapping [ErrUnavailable] when NVML cannot be used
// (libnvidia-ml.so absent, driver not loaded, no permission, or a build
// without cgo), and with [ErrNoDevices] when no usable GPU has an energy
// counter. GPUs without one (pre-Volta, some vGPUs) are skipped, not read
// as zero. Energy is board-level: under MIG each physical GPU is read
// once. The library never falls back to a simulated source on its own.
// docs/operations.md says which GPUs are metered and how shared GPUs are
// split. Options choose the GPUs ([WithDevices]) and the processes whose
// work is attributed ([WithProcesses]).
func NewNVMLSource(opts ...NVMLOption) (Source, error) {
	s, err := nvmlsource.New(opts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// NVMLOption configures [NewNVMLSource].
type NVMLOption = nvmlsource.Option

// WithDevices names the GPUs to meter, overriding CUDA_VISIBLE_DEVICES and
// NVIDIA_VISIBLE_DEVICES: NVML indices, GPU- UUIDs, unique UUID prefixes,
// or MIG- UUIDs, which meter their parent board. A gateway names the GPUs
// its local inference server runs on. An id that matches no GPU makes
// NewNVMLSource fail with an error wrapping [ErrNotVisible] that names it
// and lists the GPUs there are. By default the GPUs this process can use
// are metered, read from those variables as CUDA reads them.
func WithDevices(ids ...string) NVMLOption { return nvmlsource.WithDevices(ids...) }

// WithProcesses names the processes whose work is attributed, by host pid,
// replacing the default, this process. On a GPU that other processes use
// too, requests get the named processes' share of the board's energy by SM
// utilization, and the rest is exported as
// otelenergy.energy.other_processes.
func WithProcesses(pids ...int) NVMLOption { return nvmlsource.WithProcesses(pids...) }

// funcSource adapts a read function to [Source].
type funcSource struct {
	devices []Device
	read    func(i int) (uint64, error)
	close   func() error

	mu     sync.Mutex
	closed bool
}

// NewFuncSource returns a [Source] over devices whose counters read returns
// in millijoules, such as DCGM, RAPL or a BMC reading. Its kind, exported
// as the resource attribute otelenergy.source, is "custom".
//
// read is called from the sampler goroutine only, never concurrently with
// closeFn; i indexes devices. Its errors should wrap [ErrRead],
// [ErrDeviceLost] or [ErrUnavailable]. closeFn, which may be nil, runs once
// when the Monitor shuts down.
//
// Each Device says what it is (Type, exported as hw.type; "gpu" when
// empty) and may bound its power (MaxWatts; 2000 W when zero): a reading
// that implies more energy than that bound allows since the previous one
// is a glitch and is not charged. Repeated consistent glitches raise a
// bound that is too low, at most 4×, unless MaxWattsFirm says the device
// cannot pass it.
func NewFuncSource(devices []Device, read func(i int) (uint64, error), closeFn func() error) (Source, error) {
	if len(devices) == 0 {
		return nil, fmt.Errorf("%w: NewFuncSource needs at least one device", ErrNoDevices)
	}
	if read == nil {
		return nil, fmt.Errorf("%w: NewFuncSource needs a read function", ErrInvalidConfig)
	}
	for _, d := range devices {
		if d.MaxWatts < 0 || math.IsNaN(d.MaxWatts) || math.IsInf(d.MaxWatts, 0) {
			return nil, fmt.Errorf("%w: device %q: MaxWatts %v", ErrInvalidConfig, d.ID, d.MaxWatts)
		}
	}
	return &funcSource{devices: append([]Device(nil), devices...), read: read, close: closeFn}, nil
}

func (f *funcSource) Kind() string { return "custom" }

func (f *funcSource) Devices() []Device { return f.devices }

func (f *funcSource) ReadEnergy(i int) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, fmt.Errorf("%w: source closed", ErrUnavailable)
	}
	if i < 0 || i >= len(f.devices) {
		return 0, fmt.Errorf("%w: device index %d out of range", ErrRead, i)
	}
	return f.read(i)
}

func (f *funcSource) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if f.close != nil {
		return f.close()
	}
	return nil
}
