package otelenergy

import (
	"errors"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/ring"
)

// ErrInvalidConfig reports an option value a Monitor cannot run with.
var ErrInvalidConfig = errors.New("otelenergy: invalid configuration")

// ErrClosed reports use of a Monitor after Shutdown.
var ErrClosed = errors.New("otelenergy: monitor shut down")

// ErrInvalidDevice reports a device index outside the Monitor's devices.
var ErrInvalidDevice = errors.New("otelenergy: no such device")

// DefaultInterval is the sampling cadence. GPU energy counters step every
// 20 to 100 ms; reading faster than the fastest of them shows every step in
// its own read, which is what lets the Monitor learn when each step
// happened. A prime number of milliseconds keeps the reads from locking to
// a counter's period, so the brackets of successive steps land at every
// offset and pin the counter's phase to about a millisecond.
const DefaultInterval = 17 * time.Millisecond

// minInterval is the cadence a Monitor refuses to go at or below.
const minInterval = 5 * time.Millisecond

// defaultLiveWindow is the window of the live J/token and power figures.
const defaultLiveWindow = 10 * time.Second

// defaultCounterPeriod is the counter update period assumed until one is
// measured: NVML's on most boards. A request shorter than the period is
// marked approximate.
const defaultCounterPeriod = 100 * time.Millisecond

// ringCapacity is how many counter steps each device keeps: at a 20 ms
// counter about 2.7 minutes, far beyond the ledger's horizon and the live
// window.
const ringCapacity = ring.DefaultCapacity

// config holds a Monitor's resolved options.
type config struct {
	meterProvider metric.MeterProvider
	interval      time.Duration
	now           func() time.Time
	clockSet      bool // now is WithClock's, not time.Now
	model         string
	horizon       time.Duration
	idleWatts     float64
	idleSet       bool
	genaiOp       string
	genaiProvider string
	baggageKeys   []string
	baggageMax    int
	carbon        *carbon.Model
	host          *hostConfig // with WithHostSource
}

func newConfig(opts []Option) (config, error) {
	c := config{
		interval: DefaultInterval,
		now:      time.Now,
		horizon:  time.Duration(ledger.DefaultHorizon),
	}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	var errs []error
	if c.interval <= minInterval {
		errs = append(errs, fmt.Errorf("%w: sampling interval %v must be above %v", ErrInvalidConfig, c.interval, minInterval))
	}
	if c.horizon < c.interval {
		errs = append(errs, fmt.Errorf("%w: horizon %v shorter than the sampling interval %v", ErrInvalidConfig, c.horizon, c.interval))
	}
	if c.idleSet && (c.idleWatts < 0 || math.IsNaN(c.idleWatts) || math.IsInf(c.idleWatts, 0)) {
		errs = append(errs, fmt.Errorf("%w: idle power %v W", ErrInvalidConfig, c.idleWatts))
	}
	if (c.genaiOp == "") != (c.genaiProvider == "") {
		errs = append(errs, fmt.Errorf("%w: GenAI metrics need both an operation and a provider, got %q and %q", ErrInvalidConfig, c.genaiOp, c.genaiProvider))
	}
	if err := validateBaggage(&c); err != nil {
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
// 17 ms. It should stay below the energy counter's update period, or the
// Monitor cannot tell when the counter stepped and splits energy at its
// reads instead. An interval at or below 5 ms makes NewMonitor fail with
// [ErrInvalidConfig].
func WithInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.interval = d })
}

// WithClock sets the clock the Monitor reads time from. The default is
// time.Now; durations use its monotonic reading. Tests and simulations pass
// a fake clock and call [Monitor.Sample] by hand.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now != nil {
			c.now, c.clockSet = now, true
		}
	})
}

// WithModel names the model of the Monitor's first run, exported as
// gen_ai.request.model. The default is empty. Later runs are named by
// [Monitor.BeginRun].
func WithModel(name string) Option {
	return optionFunc(func(c *config) { c.model = name })
}

// WithHorizon sets how long the ledger waits, at most, for every request
// active in a metered interval to report its tokens past that interval
// before it splits the interval anyway. Requests that report their tokens
// only when they end need a horizon longer than they run. The default is
// 10 s. Final figures, and the span exporter's wait for them, can lag a
// request's end by up to the horizon.
func WithHorizon(d time.Duration) Option {
	return optionFunc(func(c *config) { c.horizon = d })
}

// WithIdlePower fixes the devices' static power, in W summed over all of
// them, which the ledger splits among active requests by time. By default
// it is learned from the metered steps, with the rest of the energy model.
// Negative or non-finite values make NewMonitor fail with
// [ErrInvalidConfig].
func WithIdlePower(watts float64) Option {
	return optionFunc(func(c *config) { c.idleWatts, c.idleSet = watts, true })
}

// WithGenAIMetrics makes the Monitor record the GenAI semantic
// conventions' server metrics for every tracked request that ended
// normally (not cut off by Shutdown or its maximum age) after reporting
// output tokens: gen_ai.server.request.duration, gen_ai.server.time_to_first_token
// and gen_ai.server.time_per_output_token, with gen_ai.operation.name set to
// operation (chat, text_completion, generate_content, ...),
// gen_ai.provider.name to provider, and gen_ai.request.model to the run's
// model. The first token's time is the one the ledger placed (see
// docs/attribution.md): observed within a read for a handler that reports
// as it streams, estimated for one that reports in chunks or at its end. They are recorded when the request's energy is
// final, on the sampler's goroutine, in the request's span context: the
// request path pays nothing for them. The default records none; an HTTP
// gateway in front of an OpenAI-compatible server gets them from package
// openaiproxy instead.
func WithGenAIMetrics(operation, provider string) Option {
	return optionFunc(func(c *config) { c.genaiOp, c.genaiProvider = operation, provider })
}

// WithCarbon makes the Monitor convert every request's energy into
// emissions through m (grid intensity, PUE and embodied emissions; see
// package carbon and docs/carbon.md). The caller builds the model, and
// starts and stops its Poller, so that the library never reads flags or
// secrets. A Model serves one Monitor at a time (NewMonitor fails with
// [ErrInvalidConfig] for a Model another live Monitor uses; Shutdown
// frees it); Monitors may share a Poller through Models of their own.
// The default, or a nil m, converts nothing.
func WithCarbon(m *carbon.Model) Option {
	return optionFunc(func(c *config) { c.carbon = m })
}
