package carbon

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors. Every error of this package wraps one of these, so that
// errors.Is tells what went wrong; none carries a token or password.
var (
	// ErrInvalidConfig reports a value this package cannot work with: an
	// unparsable intensity or PUE, an empty zone, a missing secret.
	ErrInvalidConfig = errors.New("carbon: invalid configuration")
	// ErrUnauthorized reports a provider that refused the credentials
	// (401 or 403), or a login that failed.
	ErrUnauthorized = errors.New("carbon: provider refused the credentials")
	// ErrUnknownZone reports a zone or region the provider does not know
	// (its 400 or 404 answer to the zone asked for).
	ErrUnknownZone = errors.New("carbon: zone unknown to the provider")
	// ErrRateLimited reports a 429; see [StatusError.RetryAfter].
	ErrRateLimited = errors.New("carbon: provider rate limit")
	// ErrServer reports a 5xx answer.
	ErrServer = errors.New("carbon: provider server error")
	// ErrTimeout reports an answer that did not come before the fetch's
	// deadline. It also matches context.DeadlineExceeded.
	ErrTimeout = errors.New("carbon: provider did not answer in time")
	// ErrMalformed reports an answer that is not the provider's documented
	// shape: not JSON, a figure missing, negative or in an unknown unit.
	ErrMalformed = errors.New("carbon: malformed answer")
	// ErrUnavailable reports any other failure to reach the provider (a
	// refused connection, an unexpected status).
	ErrUnavailable = errors.New("carbon: provider unavailable")
)

// StatusError is a provider's HTTP answer that was not a success. It
// wraps the sentinel that classifies it ([ErrRateLimited], [ErrServer],
// [ErrUnknownZone], [ErrUnauthorized] or [ErrUnavailable]).
type StatusError struct {
	// Provider is the provider's Source name, such as "electricitymaps".
	Provider string
	// Status is the HTTP status code of the answer.
	Status int
	// RetryAfter is the wait a 429 or 503 asked for in its Retry-After
	// header (seconds or an HTTP date), or 0.
	RetryAfter time.Duration
	kind       error
}

// Error says the provider, the status and any Retry-After; never a
// secret, a URL or the answer's body.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("%v: %s answered %d", e.kind, e.Provider, e.Status)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(", retry after %v", e.RetryAfter)
	}
	return s
}

// Unwrap returns the sentinel that classifies the answer.
func (e *StatusError) Unwrap() error { return e.kind }

// Kind says what an intensity figure means.
type Kind uint8

const (
	// Average is the emissions of the zone's generation mix per kWh
	// consumed (lifecycle or direct): what SCI and most reporting use.
	Average Kind = iota + 1
	// Marginal is the emissions of the generators that answer a change in
	// load (WattTime's MOER): what load shifting uses.
	Marginal
)

// String returns "average", "marginal", or "unknown" for the zero Kind
// and any other value.
func (k Kind) String() string {
	switch k {
	case Average:
		return "average"
	case Marginal:
		return "marginal"
	}
	return "unknown"
}

// Source names, for the metric attribute that says where a figure came
// from. They are few and fixed, never a zone or a value.
const (
	SourceStatic          = "static"
	SourceElectricityMaps = "electricitymaps"
	SourceWattTime        = "watttime"
	SourceUKGrid          = "carbonintensity.org.uk"
)

// Intensity is a grid's carbon intensity.
type Intensity struct {
	// MgPerKWh is the intensity in mg CO2e per kWh (436 g/kWh is
	// 436_000): an integer, so that the conversion is exact.
	MgPerKWh uint64
	// Kind says whether the figure is an [Average] or a [Marginal] one.
	Kind Kind
	// Source is one of the Source constants.
	Source string
	// Zone is the provider's zone or region, "" for a static figure.
	Zone string
	// At is the instant the provider says the figure describes (the start
	// of its hour or half hour), zero for a static figure.
	At time.Time
}

// GramsPerKWh returns the intensity in g CO2e per kWh.
func (i Intensity) GramsPerKWh() float64 { return float64(i.MgPerKWh) / 1000 }

// Provider fetches the current intensity of one zone.
//
// The [Poller] calls Intensity from one goroutine at a time. It returns
// an error that wraps one of this package's sentinels, and returns when
// ctx ends.
type Provider interface {
	Intensity(ctx context.Context) (Intensity, error)
}

// Static is one intensity that does not change: a figure you know (a
// contract's, a yearly average) or one to test with. It is a [Provider]
// whose every fetch returns it, and a [Reader] whose reading is always
// it, so a [Model] can use it without a [Poller]. Build it with
// [NewStatic]; the zero Static has no reading. It is safe for concurrent
// use.
type Static struct{ r *Reading }

// NewStatic returns the static intensity i. A zero Kind is taken as
// [Average] and an empty Source as [SourceStatic].
func NewStatic(i Intensity) Static {
	if i.Kind == 0 {
		i.Kind = Average
	}
	if i.Source == "" {
		i.Source = SourceStatic
	}
	return Static{r: &Reading{Intensity: i}}
}

// Intensity returns the static intensity; for the zero Static, an error
// wrapping [ErrInvalidConfig].
func (s Static) Intensity(context.Context) (Intensity, error) {
	if s.r == nil {
		return Intensity{}, fmt.Errorf("%w: a Static not built by NewStatic", ErrInvalidConfig)
	}
	return s.r.Intensity, nil
}

// Current returns the static reading, nil for the zero Static. It is
// the same pointer at every call.
func (s Static) Current() *Reading { return s.r }

// Reading is the intensity a [Poller] publishes: immutable once
// published, so that readers share it without copying.
type Reading struct {
	Intensity
	// Fetched is when the poller first got the figure, on its clock (a
	// poll that gets the same figure again keeps the reading; see
	// [Poller.Age] for the last answer); zero for the fallback.
	Fetched time.Time
	// Fallback is true when this is the static fallback, in force because
	// the provider has not answered yet or its figure went stale.
	Fallback bool
}
