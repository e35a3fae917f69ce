package carbon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxBody bounds what is read of an answer: the figures are a few hundred
// bytes, and a provider gone wrong must not fill memory. A longer answer
// is malformed: it is never cut and parsed.
const maxBody = 1 << 20

// ClientOption configures a provider's HTTP client.
type ClientOption interface {
	apply(*client)
}

type clientOptionFunc func(*client)

func (f clientOptionFunc) apply(c *client) { f(c) }

// WithHTTPClient sets the HTTP client a provider uses; nil keeps the
// default, a client of its own with http.DefaultTransport and no overall
// timeout (each fetch's context bounds it; see [WithFetchTimeout]). A
// client whose CheckRedirect is nil is used through a shallow copy that
// follows no redirect (a 3xx fails with [ErrUnavailable]), so that no
// token follows one; hc itself is not modified.
func WithHTTPClient(hc *http.Client) ClientOption {
	return clientOptionFunc(func(c *client) {
		if hc != nil {
			c.hc = hc
		}
	})
}

// WithBaseURL sets the provider's base URL, for a proxy or a test server.
// The default is the provider's public API, as each constructor says. The
// constructor refuses, with [ErrInvalidConfig], a URL that is not
// http(s)://host (an empty one included), and a plain http:// one to a
// host other than loopback for a provider that sends a secret.
func WithBaseURL(u string) ClientOption {
	return clientOptionFunc(func(c *client) { c.base = strings.TrimRight(u, "/") })
}

// client is what the three providers share: one GET, its status mapped
// to a sentinel, its body decoded as JSON.
type client struct {
	name string
	hc   *http.Client
	base string
	now  func() time.Time
}

// newClient resolves the options. A provider that sends a secret
// (secret true) refuses a plain http:// base URL unless its host is a
// loopback address: the secret would cross the network in clear.
func newClient(name, base string, secret bool, opts []ClientOption) (client, error) {
	c := client{name: name, hc: &http.Client{}, base: base, now: time.Now}
	for _, o := range opts {
		o.apply(&c)
	}
	u, err := url.Parse(c.base)
	if err != nil {
		// url.Parse's error quotes the URL, which may hold credentials.
		return client{}, fmt.Errorf("%w: %s base URL does not parse", ErrInvalidConfig, name)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return client{}, fmt.Errorf("%w: %s base URL %s: want http(s)://host", ErrInvalidConfig, name, u.Redacted())
	}
	if secret && u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return client{}, fmt.Errorf("%w: %s base URL %s: the credentials need https (http only to a loopback host)", ErrInvalidConfig, name, u.Redacted())
	}
	if c.hc.CheckRedirect == nil {
		// Go's client copies every custom header (auth-token, or an
		// Authorization to the same host name on another port) to the
		// target of a redirect. The providers' APIs do not redirect, so a
		// redirect is answered as it is, a 3xx, and no secret follows it.
		hc := *c.hc
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		c.hc = &hc
	}
	return c, nil
}

// isLoopback reports whether host is localhost or a loopback IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// get fetches path with header set by hdr and decodes a 200 answer into
// v. An unknown zone is told by notFound(status).
func (c *client) get(ctx context.Context, path string, q url.Values, hdr func(http.Header), v any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidConfig, c.name, err)
	}
	req.Header.Set("Accept", "application/json")
	if hdr != nil {
		hdr(req.Header)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	// One byte past the limit tells a body cut at the limit, which could
	// parse (valid JSON, then what follows cut off), from one that ends
	// within it.
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return c.transportError(ctx, err)
	}
	if resp.StatusCode != http.StatusOK {
		return c.statusError(resp)
	}
	if len(body) > maxBody {
		return fmt.Errorf("%w: %s: answer longer than %d bytes", ErrMalformed, c.name, maxBody)
	}
	if err := json.Unmarshal(body, v); err != nil {
		// The decoder's message names a type or an offset, not the body.
		return fmt.Errorf("%w: %s: %w", ErrMalformed, c.name, err)
	}
	return nil
}

// transportError classifies a failure to get an answer. The url.Error's
// URL is left out: it is ours and adds nothing, and a user-built base URL
// could hold credentials.
func (c *client) transportError(ctx context.Context, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: %w", ErrTimeout, c.name, context.DeadlineExceeded)
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %s: %w", ErrTimeout, c.name, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, c.name, ctx.Err())
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, c.name, err)
}

func (c *client) statusError(resp *http.Response) error {
	e := &StatusError{Provider: c.name, Status: resp.StatusCode}
	switch s := resp.StatusCode; {
	case s == http.StatusTooManyRequests:
		e.kind = ErrRateLimited
	case s == http.StatusBadRequest || s == http.StatusNotFound:
		e.kind = ErrUnknownZone
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		e.kind = ErrUnauthorized
	case s >= 500:
		e.kind = ErrServer
	default:
		e.kind = ErrUnavailable
	}
	if e.kind == ErrRateLimited || resp.StatusCode == http.StatusServiceUnavailable {
		e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), c.now())
	}
	return e
}

// maxRetryAfter bounds a Retry-After: a provider asking for a day must
// not silence the poller for longer than its staleness makes sense.
const maxRetryAfter = 6 * time.Hour

// parseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date (RFC 9110, 10.2.3). It returns 0 for anything else.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if isDigits(v) {
		// Too many digits for 64 bits is still a delay, a long one.
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter)
	}
	return 0
}

// isDigits reports whether s is one or more ASCII digits.
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// gramsToMg converts a provider's g/kWh figure to mg/kWh, refusing what
// is not a figure.
func (c *client) gramsToMg(g float64, what string) (uint64, error) {
	return c.scaleToMg(g, 1000, what)
}

func (c *client) scaleToMg(v, mgPerUnit float64, what string) (uint64, error) {
	mg := v * mgPerUnit
	if math.IsNaN(mg) || mg < 0 || mg > maxMgPerKWh {
		return 0, fmt.Errorf("%w: %s: %s %v out of range", ErrMalformed, c.name, what, v)
	}
	return uint64(math.Round(mg)), nil
}

// parseTime reads an RFC 3339 instant, or the UK API's minute-precision
// "2006-01-02T15:04Z". A missing or unparsable one is zero: the figure
// is still a figure.
func parseTime(s string) time.Time {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t
		}
	}
	return time.Time{}
}
