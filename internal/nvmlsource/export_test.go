//go:build cgo && linux

package nvmlsource

import "time"

// WithEnv makes New read the environment from env instead of the process's,
// so that parallel tests never mutate the process environment.
func WithEnv(env map[string]string) Option {
	return optionFunc(func(c *config) {
		c.lookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	})
}

// WithShareInterval sets the listing period; zero starts no goroutine.
func WithShareInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.shareInterval = d })
}

// WithHostPIDs says whether pids compare with NVML's.
func WithHostPIDs(host bool) Option {
	return optionFunc(func(c *config) { c.hostPIDs = func() bool { return host } })
}

// RefreshShares lists the processes on every board now.
func RefreshShares(s *Source) { s.refreshShares() }

// WithShareClock sets the clock that times a run of failed listings.
func WithShareClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now = now })
}

// ListingStale is how long a failing listing keeps a board's last share.
const ListingStale = listingStale

// WithProcRoot makes the source read the process tree under dir instead
// of /proc.
func WithProcRoot(dir string) Option {
	return optionFunc(func(c *config) { c.procRoot = dir })
}

// WithSampleClock sets the clock the utilization samples' cursors read:
// a monotonic time and the wall clock, which may step apart.
func WithSampleClock(clock func() (time.Duration, time.Time)) Option {
	return optionFunc(func(c *config) { c.clock = clock })
}
