package energysource

import (
	"time"

	"github.com/otelenergy/otelenergy/internal/amdsmi"
	"github.com/otelenergy/otelenergy/internal/amdsmi/amdsmitest"
)

// WithAMDNode makes the AMD SMI source read the fake node nd, whose clock
// the start check advances.
func WithAMDNode(nd *amdsmitest.Node) Option {
	return optionFunc(func(c *config) {
		c.amdLib = nd
		c.amdOpts = []amdsmi.Option{amdsmi.WithSleep(func(d time.Duration) { nd.Advance(int64(d)) })}
	})
}
