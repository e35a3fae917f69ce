package rapl

// WithProc exposes withProc to the external tests.
var WithProc = withProc

// RefreshShare reads the CPU times now.
func (s *Source) RefreshShare() { s.refreshShare() }
