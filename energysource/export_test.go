package energysource

import (
	"os"
	"time"

	"github.com/otelenergy/otelenergy/internal/amdsmi"
	"github.com/otelenergy/otelenergy/internal/amdsmi/amdsmitest"
	"github.com/otelenergy/otelenergy/internal/rapl"
)

// WithRAPLOpen makes the RAPL source open its counters with open.
func WithRAPLOpen(open func(string) (*os.File, error)) Option {
	return optionFunc(func(c *config) { c.raplOpt = append(c.raplOpt, rapl.WithOpen(open)) })
}

// WithAMDNode makes the AMD SMI source read the fake node nd, whose clock
// the start check advances.
func WithAMDNode(nd *amdsmitest.Node) Option {
	return optionFunc(func(c *config) {
		c.amdLib = nd
		c.amdOpts = []amdsmi.Option{amdsmi.WithSleep(func(d time.Duration) { nd.Advance(int64(d)) })}
	})
}
