package nvmlsource

import "github.com/otelenergy/otelenergy/internal/source"

const (
	// kind is what [Source.Kind] returns.
	kind = "nvml"
	// vendor is the hw.vendor of every device this package reports.
	vendor = "NVIDIA"
)

// Option configures [New]. The interface is sealed: only this package
// implements it.
type Option interface {
	apply(*config)
}

// Skipped describes a GPU that [New] found but left out of
// [Source.Devices] because its probe failed.
type Skipped struct {
	// Device holds what was learned before the probe failed. Index and
	// Vendor are always set; ID and Name may be empty.
	Device source.Device
	// Reason wraps [source.ErrNotSupported] when the GPU has no energy
	// counter, [source.ErrDeviceLost] when it is lost, and [source.ErrRead]
	// otherwise.
	Reason error
}
