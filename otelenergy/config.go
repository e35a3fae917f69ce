package otelenergy

import (
	"errors"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelenergy/otelenergy/ring"
)

// ErrInvalidConfig reports an option value a Monitor cannot run with.
var ErrInvalidConfig = errors.New("otelenergy: invalid configuration")

// ErrClosed reports use of a Monitor after Shutdown.
var ErrClosed = errors.New("otelenergy: monitor shut down")

// Defaults.
const (
	// DefaultInterval is the sampling cadence: NVML's counter updates about
	// every 100 ms, so sampling faster reads the same value twice.
	DefaultInterval = 100 * time.Millisecond
	// MinInterval is the cadence a Monitor refuses to go at or below.
	MinInterval = 10 * time.Millisecond
	// DefaultLiveWindow is the window of the live J/token and power figures.
	DefaultLiveWindow = 10 * time.Second
	// DefaultCounterUpdatePeriod is how often a GPU's energy counter is
	// assumed to advance. A request shorter than this is marked approximate.
	DefaultCounterUpdatePeriod = 100 * time.Millisecond
)

// config holds a Monitor's resolved options.
type config struct {
	meterProvider metric.MeterProvider
	interval      time.Duration
	liveWindow    time.Duration
	ringCapacity  int
	now           func() time.Time
	model         string
	counterPeriod time.Duration
	attribution   Attribution
	ledgerWeights LedgerWeights
	idleWatts     float64
	idleSet       bool
}

func newConfig(opts []Option) (config, error) {
	c := config{
		interval:      DefaultInterval,
		liveWindow:    DefaultLiveWindow,
		ringCapacity:  ring.DefaultCapacity,
		now:           time.Now,
		counterPeriod: DefaultCounterUpdatePeriod,
		attribution:   AttributionLedger,
		ledgerWeights: defaultLedgerWeights,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	var errs []error
	if c.interval <= MinInterval {
		errs = append(errs, fmt.Errorf("%w: sampling interval %v must be above %v", ErrInvalidConfig, c.interval, MinInterval))
	}
	if c.liveWindow < c.interval {
		errs = append(errs, fmt.Errorf("%w: live window %v shorter than the sampling interval %v", ErrInvalidConfig, c.liveWindow, c.interval))
	}
	if c.counterPeriod < 0 {
		errs = append(errs, fmt.Errorf("%w: negative counter update period %v", ErrInvalidConfig, c.counterPeriod))
	}
	if c.attribution != AttributionLedger && c.attribution != AttributionWindowShare {
		errs = append(errs, fmt.Errorf("%w: unknown attribution mode %d", ErrInvalidConfig, c.attribution))
	}
	if c.idleSet && (c.idleWatts < 0 || math.IsNaN(c.idleWatts) || math.IsInf(c.idleWatts, 0)) {
		errs = append(errs, fmt.Errorf("%w: idle power %v W", ErrInvalidConfig, c.idleWatts))
	}
	if err := c.ledgerWeights.validate(); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// Option configures a Monitor.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider sets the MeterProvider the Monitor registers its
// instruments with. The default is the global provider, otel.GetMeterProvider,
// read when the Monitor is built.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meterProvider = mp })
}

// WithInterval sets the sampling cadence. The default is [DefaultInterval],
// 100 ms. An interval at or below [MinInterval] (10 ms) makes NewMonitor fail
// with [ErrInvalidConfig].
func WithInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.interval = d })
}

// WithLiveWindow sets the window of the live J/token and power figures. The
// default is [DefaultLiveWindow], 10 s.
func WithLiveWindow(d time.Duration) Option {
	return optionFunc(func(c *config) { c.liveWindow = d })
}

// WithRingCapacity sets how many samples the Monitor keeps, rounded up to a
// power of two. The default is [ring.DefaultCapacity], 8192: about 13.6
// minutes at the default cadence. A request older than the ring is
// attributed from its oldest sample. A capacity below 2 makes NewMonitor fail
// with an error wrapping [ring.ErrCapacity].
func WithRingCapacity(n int) Option {
	return optionFunc(func(c *config) { c.ringCapacity = n })
}

// WithClock sets the clock the Monitor reads time from. The default is
// time.Now; durations use its monotonic reading. Tests and simulations pass
// a fake clock, the same one as [SimulatedConfig.Now].
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now != nil {
			c.now = now
		}
	})
}

// WithModel names the model of the Monitor's first run, exported as
// gen_ai.request.model. The default is empty. Later runs are named by
// [Monitor.BeginRun].
func WithModel(name string) Option {
	return optionFunc(func(c *config) { c.model = name })
}

// WithCounterUpdatePeriod sets how often the energy counter is assumed to
// advance. A request window shorter than this is marked approximate
// (otelenergy.energy.approximate). The default is
// [DefaultCounterUpdatePeriod], 100 ms, NVML's update period on most boards.
func WithCounterUpdatePeriod(d time.Duration) Option {
	return optionFunc(func(c *config) { c.counterPeriod = d })
}
