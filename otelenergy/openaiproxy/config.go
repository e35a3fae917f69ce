package openaiproxy

import (
	"log"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
)

// DefaultMaxBodyBytes is the default of [WithMaxBodyBytes]: 8 MiB.
const DefaultMaxBodyBytes = 8 << 20

// DefaultMaxEventBytes is the largest server-sent event the proxy parses:
// 1 MiB. A larger event passes through unparsed.
const DefaultMaxEventBytes = 1 << 20

// DefaultMaxResponseBytes is the default of [WithMaxResponseBytes]: 16 MiB.
const DefaultMaxResponseBytes = 16 << 20

// DefaultBudgetBytes is the size of the [Budget] a proxy built without
// [WithBudget] holds its responses within: 64 MiB.
const DefaultBudgetBytes = 64 << 20

// config holds the resolved options.
type config struct {
	meterProvider metric.MeterProvider
	includeUsage  bool
	provider      genaiconv.ProviderNameAttr
	transport     http.RoundTripper
	maxBody       int
	upstream      bool          // upstream streaming for non-streaming clients
	upTimeout     time.Duration // > 0: bounds a response rebuilt from an upstream stream
	maxResponse   int
	budget        *Budget
	trailers      bool
	finalWait     time.Duration // > 0: trailers wait this long for the final figure
	errorHandler  func(http.ResponseWriter, *http.Request, error)
	errorLog      *log.Logger
	defaultErrors bool // errorHandler is WriteError, which New logs around
	now           func() time.Time
}

func newConfig(opts []Option) config {
	c := config{
		includeUsage: true,
		upstream:     true,
		provider:     genaiconv.ProviderNameOpenAI,
		maxBody:      DefaultMaxBodyBytes,
		maxResponse:  DefaultMaxResponseBytes,
		now:          time.Now,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	if c.errorHandler == nil {
		c.errorHandler = WriteError
		c.defaultErrors = true
	}
	if c.errorLog == nil {
		c.errorLog = log.Default()
	}
	if c.maxBody <= 0 {
		c.maxBody = DefaultMaxBodyBytes
	}
	if c.maxResponse <= 0 {
		c.maxResponse = DefaultMaxResponseBytes
	}
	if c.budget == nil {
		c.budget = NewBudget(DefaultBudgetBytes)
	}
	return c
}

// Option configures the proxy built by [New] or the middleware built by
// [NewMiddleware].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider sets the MeterProvider the proxy's instruments are
// created with. The default is the global provider, otel.GetMeterProvider,
// read when [New] or [NewMiddleware] is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meterProvider = mp })
}

// WithIncludeUsage sets whether a streaming request that does not ask for
// usage is sent upstream with stream_options.include_usage set, so that the
// backend's own token counts correct the proxy's estimates. The extra
// usage-only chunk this makes the backend send is removed from the response,
// so the client receives what it would have received without the rewrite.
// The default is true. See the package documentation, "# Usage rewrite", for
// the one kind of backend for which that does not hold.
func WithIncludeUsage(on bool) Option {
	return optionFunc(func(c *config) { c.includeUsage = on })
}

// WithUpstreamStreaming sets whether a non-streaming completion request
// (POST /v1/chat/completions or /v1/completions without "stream":true) is
// sent upstream as a stream, with "stream":true and
// "stream_options":{"include_usage":true}, so that its tokens are reported
// as the backend produces them, as a streaming client's are, rather than
// all at its end. The client still receives one application/json body:
// the proxy rebuilds, from the chunks, the body the backend would have
// returned (the rules are in docs/proxy.md), with the status, framing and
// trailers of a non-streaming response. A stream that fails (an error
// event, a backend that closes it before its end, a body above
// [WithMaxResponseBytes]) gets an OpenAI-style error with 502, one past
// [WithUpstreamTimeout] 504, and never a truncated 200; a backend that
// refuses the stream with a 4xx (other than 401, 403, 407, 408 and 429),
// or sends it in a content coding, gets the client's request once more,
// unchanged, and the proxy logs that once ([WithErrorLog]). The default
// is true.
func WithUpstreamStreaming(on bool) Option {
	return optionFunc(func(c *config) { c.upstream = on })
}

// WithUpstreamTimeout bounds how long a response rebuilt from an upstream
// stream ([WithUpstreamStreaming]) may take, from the request's start to
// the stream's end: past it the client gets 504, as a non-streaming
// response whose headers (sent only once the body is whole) did not come
// in time would. The default, also used for zero or less, is no bound of
// the proxy's own: the request context's deadline, and the transport's,
// apply. otelenergy-proxy passes its -backend-timeout.
func WithUpstreamTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.upTimeout = d })
}

// WithMaxResponseBytes bounds the body the proxy rebuilds from an upstream
// stream ([WithUpstreamStreaming]): past it the client gets 502. The
// default, also used for zero or less, is [DefaultMaxResponseBytes]
// (16 MiB).
func WithMaxResponseBytes(n int) Option {
	return optionFunc(func(c *config) { c.maxResponse = n })
}

// WithBudget sets the [Budget] the proxy holds response bytes within, all
// requests together: the bodies it rebuilds (a request whose body does
// not fit gets 503 with Retry-After) and the non-streaming bodies it reads
// (one that does not fit passes through unread). A stage in front that
// holds request bodies can share it. The default is a Budget of its own
// of [DefaultBudgetBytes] (64 MiB), one per [New] or [NewMiddleware] call.
func WithBudget(b *Budget) Option {
	return optionFunc(func(c *config) { c.budget = b })
}

// WithProviderName sets gen_ai.provider.name on the GenAI metrics. The
// default is "openai", the conventions' value for the OpenAI API, which is
// the protocol the backend speaks; a gateway in front of vLLM or another
// server may name it instead.
func WithProviderName(name string) Option {
	return optionFunc(func(c *config) {
		if name != "" {
			c.provider = genaiconv.ProviderNameAttr(name)
		}
	})
}

// WithTransport sets the RoundTripper [New] sends upstream requests with.
// The default is http.DefaultTransport. [NewMiddleware] ignores it.
func WithTransport(rt http.RoundTripper) Option {
	return optionFunc(func(c *config) { c.transport = rt })
}

// WithMaxBodyBytes bounds what the proxy holds to parse: a request body, and
// a non-streaming response body. A body above the bound passes through
// unparsed. A request body that has a method Bytes() []byte returning its
// unread bytes (one a stage in front already read whole) is parsed in
// place, not copied. A bound of zero or less selects the default,
// [DefaultMaxBodyBytes] (8 MiB).
func WithMaxBodyBytes(n int) Option {
	return optionFunc(func(c *config) { c.maxBody = n })
}

// WithErrorHandler sets the function [New]'s reverse proxy calls when the
// backend cannot be reached or its response cannot be read, as
// httputil.ReverseProxy.ErrorHandler. The default, also used for nil, is
// [WriteError]: a 502 or 504 with an OpenAI-style JSON body.
// [NewMiddleware] ignores it.
func WithErrorHandler(h func(http.ResponseWriter, *http.Request, error)) Option {
	return optionFunc(func(c *config) { c.errorHandler = h })
}

// WithErrorLog sets the logger [New]'s reverse proxy reports its errors
// to: a backend it cannot reach (with the dial address, which the client's
// error body does not carry), and a body copy that breaks, as
// httputil.ReverseProxy.ErrorLog. The default is the standard logger,
// log.Default, as ReverseProxy's; a binary with log/slog passes
// slog.NewLogLogger. [NewMiddleware] ignores it.
func WithErrorLog(l *log.Logger) Option {
	return optionFunc(func(c *config) { c.errorLog = l })
}

// WithEnergyTrailers sets whether each completion's response ends with
// the HTTP trailers [TrailerEnergy] (the request's energy in whole
// millijoules as [otelenergy.Request.End] estimates it when the response
// ends; absent when no energy could be attributed) and [TrailerApproximate]
// ("true" or "false", as [otelenergy.Result.Approximate]), and, when the
// Monitor was built with otelenergy.WithCarbon, [TrailerCo2e] (the
// request's emissions in mg CO2e with three decimals, absent when no
// figure could be given). The body is not touched. The trailers are
// announced in the Trailer header, and the
// backend's Content-Length is dropped so that HTTP/1.1 responses are
// chunked, which trailers need; HTTP/2 carries them as a final HEADERS
// frame. The default is false.
func WithEnergyTrailers(on bool) Option {
	return optionFunc(func(c *config) { c.trailers = on })
}

// WithFinalTrailers turns the energy trailers of [WithEnergyTrailers] on
// and has them carry the request's final figure, the one its span carries
// as energy.millijoules, rather than End's estimate: after the last byte
// of the body is flushed, the proxy waits up to wait for the ledger to
// settle the request ([otelenergy.Request.WaitFinal]) before it sends the
// trailers. The body is never delayed; only the end of the response is.
// When wait passes first, the trailers carry the estimate as of then with
// [TrailerApproximate] "true"; a client that goes away ends the wait. A
// wait of zero or less sends the estimate at once, as WithEnergyTrailers.
// Each wait holds its request's goroutine and connection, so a proxy
// under load holds up to its request rate times wait more of them.
func WithFinalTrailers(wait time.Duration) Option {
	return optionFunc(func(c *config) { c.trailers, c.finalWait = true, wait })
}
