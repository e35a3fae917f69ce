//go:build !(cgo && linux)

package nvmlsource

import (
	"fmt"

	"github.com/otelenergy/otelenergy/internal/proctree"
	"github.com/otelenergy/otelenergy/internal/source"
)

// config records the options that exist in every build; this build
// applies none of them.
type config struct {
	devices []string
	pids    []int
	set     proctree.Set
}

// Source stands in for the NVML source in builds without cgo on Linux.
// [New] never returns one, and its methods behave as a closed source: no
// devices, and ReadEnergy fails with [source.ErrUnavailable].
type Source struct{}

var (
	_ source.Source  = (*Source)(nil)
	_ source.Skipper = (*Source)(nil)
	_ source.Sharer  = (*Source)(nil)
)

// New always returns an error wrapping [source.ErrUnavailable]: go-nvml
// needs cgo, and this build has no cgo or is not for Linux. The options are
// applied and ignored.
func New(opts ...Option) (*Source, error) {
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	return nil, errNoCgo()
}

// Kind returns "nvml".
func (s *Source) Kind() string { return kind }

// Devices returns nil.
func (s *Source) Devices() []source.Device { return nil }

// Skipped returns nil.
func (s *Source) Skipped() []Skipped { return nil }

// Share returns the zero Share.
func (s *Source) Share(int) source.Share { return source.Share{} }

// ReadEnergy returns an error wrapping [source.ErrUnavailable].
func (s *Source) ReadEnergy(int) (uint64, error) {
	return 0, errNoCgo()
}

// errNoCgo explains why this build cannot read NVML.
func errNoCgo() error {
	return fmt.Errorf("%w: NVML needs cgo on linux, and this build has no cgo or is not for linux", source.ErrUnavailable)
}

// Close does nothing and returns nil.
func (s *Source) Close() error { return nil }
