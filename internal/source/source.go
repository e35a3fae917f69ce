// Package source defines the contract between the sampler and the things that
// read hardware energy counters. It lives under internal so that the NVML
// adapter and the public otelenergy package can share it without an import
// cycle; otelenergy re-exports every name here.
package source

import "errors"

// Sentinel errors. Implementations wrap them with %w so that callers can match
// them with errors.Is.
var (
	// ErrUnavailable reports that a source cannot be used at all on this
	// machine, for example because libnvidia-ml.so is absent, the driver is not
	// loaded, or the build has no cgo.
	ErrUnavailable = errors.New("otelenergy: energy source unavailable")
	// ErrNotSupported reports that a device has no cumulative energy counter
	// (pre-Volta GPUs and some vGPUs).
	ErrNotSupported = errors.New("otelenergy: energy counter not supported by device")
	// ErrDeviceLost reports that a device stopped answering (NVML's
	// GPU_IS_LOST). A lost device is never read again by its source.
	ErrDeviceLost = errors.New("otelenergy: device lost")
	// ErrRead reports a transient failure to read a counter. The sampler
	// skips the device for that tick; the next good reading's delta covers
	// the gap, so no energy is lost.
	ErrRead = errors.New("otelenergy: energy read failed")
	// ErrNoDevices reports that a source found no device it can read.
	ErrNoDevices = errors.New("otelenergy: no readable devices")
)

// Device describes one energy-metered device.
type Device struct {
	// ID identifies the device stably across reboots and driver reloads: the
	// GPU UUID for NVML. It is exported as hw.id.
	ID string
	// Name is the product name, exported as hw.name.
	Name string
	// Vendor is exported as hw.vendor.
	Vendor string
	// Index is the device's index as its driver numbers it.
	Index int
	// CounterMax is the largest value the raw counter takes before it wraps
	// to zero, in millijoules like ReadEnergy's readings. Zero means the full
	// uint64 range, as for NVML. A source that scales a µJ counter such as
	// RAPL's to mJ scales CounterMax the same way.
	CounterMax uint64
	// Type is the device's hw.type: "gpu", "cpu", "memory", ... Empty means
	// "gpu".
	Type string
	// MaxWatts bounds the power the device can draw. A reading that implies
	// more energy than MaxWatts times the time since the previous good
	// reading is a glitch, not energy. Zero selects DefaultMaxWatts.
	MaxWatts float64
	// MaxWattsFirm reports MaxWatts as a ceiling the device cannot pass,
	// read from the hardware's own limits (for NVML, the most the power
	// limit can be set to), rather than an estimate. The sampler learns a
	// bound that readings show is too low (see the tracker package's
	// "Learning the bound"); a firm bound it never raises, since readings
	// above it are a counter misreading. It means nothing when MaxWatts is
	// zero. The zero value, false, keeps learning, as for the default bound.
	MaxWattsFirm bool
}

// DefaultMaxWatts is the power bound of a device that declares none: above
// every single accelerator board sold today (the largest draw about 1.2 kW),
// with margin, and still far below the megawatts a corrupt reading implies.
const DefaultMaxWatts = 2000

// HWType returns d.Type, or "gpu" when it is empty.
func (d Device) HWType() string {
	if d.Type == "" {
		return "gpu"
	}
	return d.Type
}

// PowerBound returns d.MaxWatts, or DefaultMaxWatts when it is zero.
func (d Device) PowerBound() float64 {
	if d.MaxWatts <= 0 {
		return DefaultMaxWatts
	}
	return d.MaxWatts
}

// Skipped is a device a source found but does not read, and why.
type Skipped struct {
	// Device holds what was learned of the device. ID may be empty.
	Device Device
	// Reason wraps ErrNotVisible when the process cannot use the device,
	// ErrNotSupported when it has no energy counter, ErrDeviceLost when it
	// is lost, and ErrRead when its probe failed otherwise.
	Reason error
}

// ErrNotVisible reports a device left out because this process cannot use
// it (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, or an explicit device
// list).
var ErrNotVisible = errors.New("otelenergy: device not visible to this process")

// Skipper is implemented by sources that leave some devices out.
type Skipper interface {
	// Skipped returns the devices left out, with the reason for each. The
	// result never changes over the source's life.
	Skipped() []Skipped
}

// Share says how much of one device's energy belongs to the processes whose
// work is attributed (this process by default), as of the source's latest
// look at the device.
type Share struct {
	// Processes is the number of compute processes on the device at the
	// latest listing, or -1 when unknown.
	Processes int
	// Shared is true when processes other than the attributed ones use the
	// device, or may: a source that cannot prove the attributed processes
	// alone use it reports it Shared.
	Shared bool
	// Split is true when Fraction was measured. A shared device whose
	// utilization per process is unavailable (MIG, vGPU, NOT_SUPPORTED)
	// has Shared true and Split false: its energy is not split, and
	// requests are marked approximate.
	Split bool
	// Fraction is the attributed processes' share of the device's energy,
	// in [0, 1]; meaningful when Split is true.
	Fraction float64
}

// Sharer is implemented by sources that know who else uses their devices.
// Share is called by the sampler on every reading and must not block: it
// returns a value the source refreshed on its own schedule.
type Sharer interface {
	Share(i int) Share
}

// Source reads cumulative energy counters.
//
// Devices must return the same slice contents for the life of the source:
// the sampler identifies a device by its index in that slice. ReadEnergy is
// called by exactly one goroutine (the sampler) and must not block for long;
// it must be safe to call concurrently with Close, after which it returns an
// error wrapping ErrUnavailable. Close is idempotent.
type Source interface {
	// Kind names the implementation: "nvml", "simulated" or "custom". It is
	// exported as the resource attribute otelenergy.source.
	Kind() string
	// Devices lists the readable devices.
	Devices() []Device
	// ReadEnergy returns the raw cumulative counter of Devices()[i] in
	// millijoules. Errors wrap ErrRead, ErrDeviceLost or ErrUnavailable.
	ReadEnergy(i int) (uint64, error)
	// Close releases the source. It is idempotent.
	Close() error
}

// Stamper is implemented by sources whose counters carry the time of their
// own update, such as AMD SMI's energy timestamp. The sampler then places
// each step at that time, mapped onto its own clock, instead of inferring
// it from the reads (see package steptime).
type Stamper interface {
	// ReadEnergyStamped is ReadEnergy with the counter's timestamp, in ns
	// on the device's clock: its origin is arbitrary, and it advances with
	// real time.
	ReadEnergyStamped(i int) (mj uint64, stampNs uint64, err error)
}
