//go:build !(cgo && linux)

package nvmlsource

// ProcessReader stands in for the NVML process reader in builds without
// cgo on Linux, where no [Source] is ever returned.
type ProcessReader struct{}

// NewProcessReader returns a reader whose Read always fails.
func (s *Source) NewProcessReader() *ProcessReader { return &ProcessReader{} }

// Read resets b and returns an error wrapping source.ErrUnavailable.
func (r *ProcessReader) Read(i int, b *BoardProcesses) error {
	b.Reset()
	return errNoCgo()
}
