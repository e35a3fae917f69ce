package otelenergy

import (
	"fmt"
	"sync"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
)

// Source reads cumulative energy counters; see the interface's methods for
// its contract. [NewNVMLSource], [NewSimulatedSource] and [NewFuncSource]
// build the three implementations. A Monitor takes ownership of its Source
// and closes it on Shutdown.
type Source = source.Source

// Device describes one energy-metered device.
type Device = source.Device

// Sentinel errors from sources. Match them with errors.Is.
var (
	ErrUnavailable  = source.ErrUnavailable
	ErrNotSupported = source.ErrNotSupported
	ErrDeviceLost   = source.ErrDeviceLost
	ErrRead         = source.ErrRead
	ErrNoDevices    = source.ErrNoDevices
)

// Source kinds, exported as the resource attribute otelenergy.source.
const (
	SourceNVML      = "nvml"
	SourceSimulated = "simulated"
	SourceCustom    = "custom"
)

// NewNVMLSource returns a source that reads every NVIDIA GPU's
// GetTotalEnergyConsumption counter through NVML.
//
// It fails with an error wrapping [ErrUnavailable] when NVML cannot be used
// (libnvidia-ml.so absent, driver not loaded, no permission, or a build
// without cgo), and with [ErrNoDevices] when no GPU has an energy counter.
// GPUs without one (pre-Volta, some vGPUs) are skipped, not read as zero.
// Energy is board-level: under MIG each physical GPU is read once. The
// library never falls back to a simulated source on its own.
func NewNVMLSource() (Source, error) {
	s, err := nvmlsource.New()
	if err != nil {
		return nil, err
	}
	return s, nil
}

// FuncSource adapts a function that reads a counter of the caller's own,
// such as DCGM, RAPL or a BMC reading, to [Source]. Its kind is "custom".
type FuncSource struct {
	devices []Device
	read    func(i int) (uint64, error)
	close   func() error

	mu     sync.Mutex
	closed bool
}

var _ Source = (*FuncSource)(nil)

// NewFuncSource returns a [Source] over devices whose counters read returns
// in millijoules. read is called from the sampler goroutine only; i indexes
// devices. Its errors should wrap [ErrRead], [ErrDeviceLost] or
// [ErrUnavailable]. closeFn, which may be nil, runs once on Close.
func NewFuncSource(devices []Device, read func(i int) (uint64, error), closeFn func() error) (*FuncSource, error) {
	if len(devices) == 0 {
		return nil, fmt.Errorf("%w: NewFuncSource needs at least one device", ErrNoDevices)
	}
	if read == nil {
		return nil, fmt.Errorf("%w: NewFuncSource needs a read function", ErrInvalidConfig)
	}
	return &FuncSource{devices: append([]Device(nil), devices...), read: read, close: closeFn}, nil
}

// Kind returns "custom".
func (f *FuncSource) Kind() string { return SourceCustom }

// Devices returns the devices given to [NewFuncSource].
func (f *FuncSource) Devices() []Device { return f.devices }

// ReadEnergy calls the read function for device i. It holds the source's
// lock while read runs, so read never runs concurrently with the close
// function.
func (f *FuncSource) ReadEnergy(i int) (uint64, error) {
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

// Close runs the close function once.
func (f *FuncSource) Close() error {
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
