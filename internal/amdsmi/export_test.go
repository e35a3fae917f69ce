package amdsmi

var (
	WithShareInterval = withShareInterval
	WithProcTree      = withProcTree
)

// RefreshShares lists the processes now.
func (s *Source) RefreshShares() { s.refreshShares() }

// CheckWindow is the start check's window.
const CheckWindow = checkWindow
