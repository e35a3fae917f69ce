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
