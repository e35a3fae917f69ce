// Command fleetdrive runs concurrent streaming chat completions through the
// official openai-go client and prints, for each stream, one JSON line with
// the trace id the front gateway returned and the energy trailers the proxy
// set. The fleet e2e (e2e/fleet_test.go) runs it as a process, so that its
// own module stays free of the client, whose dependencies would move
// Jaeger's.
//
//	fleetdrive -url http://127.0.0.1:8080 -streams 200 -tokens 24 -tenants 3
//
// Stream i is for tenant-(i mod -tenants), sent as the X-Tenant header,
// which the e2e's front gateway turns into the W3C baggage member tenant;
// the trace id is the front's X-Trace-Id response header. A stream is good
// when it ends with data: [DONE] after at least -tokens content chunks and
// carries both trailers, Energy-Millijoules and Energy-Approximate.
//
// Lines are printed as streams finish, so an interrupted run still reports
// the finished ones. The exit status is 0 when every stream is good, 1 when
// one is not (after every stream's line), 2 for an invalid flag.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is what the flags set.
type config struct {
	url            string
	streams        int
	tokens         int
	tenants        int
	model          string
	timeout        time.Duration
	requestTimeout time.Duration
}

// result is one stream's line of output.
type result struct {
	Stream            int     `json:"stream"`
	Tenant            string  `json:"tenant"`
	TraceID           string  `json:"trace_id"`
	Proto             string  `json:"proto,omitempty"`
	Chunks            int     `json:"chunks"`
	EnergyMillijoules float64 `json:"energy_millijoules"`
	EnergyApproximate bool    `json:"energy_approximate"`
	Error             string  `json:"error,omitempty"`
}

// run parses args, drives the streams and writes their lines to stdout; it
// returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleetdrive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.url, "url", "", "base URL of the front gateway; the API is under /v1/ (required)")
	fs.IntVar(&cfg.streams, "streams", 200, "concurrent streams")
	fs.IntVar(&cfg.tokens, "tokens", 24, "max_tokens of each completion, and the content chunks a stream must have")
	fs.IntVar(&cfg.tenants, "tenants", 3, "distinct tenants, tenant-0 … tenant-(n-1), sent as X-Tenant")
	fs.StringVar(&cfg.model, "model", "llama-3.1-8b-instruct", "model of each completion")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "bound on the whole run")
	fs.DurationVar(&cfg.requestTimeout, "request-timeout", 2*time.Minute, "bound on each stream")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	for _, c := range []struct {
		bad  bool
		what string
	}{
		{cfg.url == "", "-url is required"},
		{fs.NArg() > 0, fmt.Sprintf("unexpected arguments %q", fs.Args())},
		{cfg.streams < 1, fmt.Sprintf("-streams %d: want at least 1", cfg.streams)},
		{cfg.tokens < 1, fmt.Sprintf("-tokens %d: want at least 1", cfg.tokens)},
		{cfg.tenants < 1, fmt.Sprintf("-tenants %d: want at least 1", cfg.tenants)},
		{cfg.timeout <= 0, fmt.Sprintf("-timeout %v: want a positive duration", cfg.timeout)},
		{cfg.requestTimeout <= 0, fmt.Sprintf("-request-timeout %v: want a positive duration", cfg.requestTimeout)},
	} {
		if c.bad {
			fmt.Fprintf(stderr, "fleetdrive: %s\n", c.what)
			return 2
		}
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	began := time.Now()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.streams}, Timeout: cfg.requestTimeout}
	defer hc.CloseIdleConnections()
	c := openai.NewClient(option.WithBaseURL(cfg.url+"/v1/"), option.WithAPIKey("unused"), option.WithHTTPClient(hc),
		option.WithMaxRetries(0)) // a retry would be a second request with its own energy and trace
	p := openai.ChatCompletionNewParams{
		Model:     cfg.model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("How much energy does a token take?")},
		MaxTokens: openai.Int(int64(cfg.tokens)),
	}

	var mu sync.Mutex
	enc := json.NewEncoder(stdout)
	failed := 0
	var wg sync.WaitGroup
	for i := range cfg.streams {
		wg.Go(func() {
			r := drive(ctx, c, p, cfg, i)
			mu.Lock()
			defer mu.Unlock()
			if r.Error != "" {
				failed++
			}
			if err := enc.Encode(r); err != nil {
				fmt.Fprintf(stderr, "fleetdrive: stream %d: %v\n", i, err)
				failed++
			}
		})
	}
	wg.Wait()
	fmt.Fprintf(stderr, "fleetdrive: %d streams, %d failed, in %v\n", cfg.streams, failed, time.Since(began).Round(time.Millisecond))
	if failed > 0 {
		return 1
	}
	return 0
}

// done is how an OpenAI-compatible stream's body ends.
var done = []byte("data: [DONE]\n\n")

// drive runs stream i and checks it.
func drive(ctx context.Context, c openai.Client, p openai.ChatCompletionNewParams, cfg config, i int) result {
	r := result{Stream: i, Tenant: fmt.Sprintf("tenant-%d", i%cfg.tenants)}
	var resp *http.Response
	var body *tailBody
	s := c.Chat.Completions.NewStreaming(ctx, p,
		option.WithHeader("X-Tenant", r.Tenant),
		option.WithResponseInto(&resp),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			res, err := next(req)
			if err == nil {
				body = &tailBody{rc: res.Body}
				res.Body = body
			}
			return res, err
		}))
	for s.Next() {
		if ch := s.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			r.Chunks++
		}
	}
	err := s.Err()
	s.Close() // reads the body to its end, where Go's client fills the trailers
	if resp != nil {
		r.TraceID, r.Proto = resp.Header.Get("X-Trace-Id"), resp.Proto
	}
	fail := func(format string, args ...any) result {
		r.Error = fmt.Sprintf(format, args...)
		return r
	}
	switch {
	case err != nil:
		return fail("stream: %v", err)
	case resp == nil || body == nil:
		return fail("no response")
	case resp.StatusCode != http.StatusOK:
		return fail("status %d", resp.StatusCode)
	case !bytes.HasSuffix(body.tail, done):
		return fail("the body ends with %q, not %q", body.tail, done)
	case r.Chunks < cfg.tokens:
		return fail("%d content chunks, want %d", r.Chunks, cfg.tokens)
	case r.TraceID == "":
		return fail("no X-Trace-Id response header")
	}
	mj, err := strconv.ParseFloat(resp.Trailer.Get("Energy-Millijoules"), 64)
	if err != nil {
		return fail("trailer Energy-Millijoules: %v (trailers %v)", err, resp.Trailer)
	}
	r.EnergyMillijoules = mj
	switch a := resp.Trailer.Get("Energy-Approximate"); a {
	case "true", "false":
		r.EnergyApproximate = a == "true"
	default:
		return fail("trailer Energy-Approximate %q, want true or false (trailers %v)", a, resp.Trailer)
	}
	return r
}

// tailBody keeps the last bytes of a response body, to tell a stream that
// ended with [DONE] from one cut short (openai-go ends both without an
// error), and reads the body to its end on Close: openai-go closes a
// stream's body at [DONE], and Go's client fills Response.Trailer only at
// the end of the body.
type tailBody struct {
	rc   io.ReadCloser
	tail []byte // the last len(done) bytes read, or fewer
}

func (b *tailBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.tail = append(b.tail, p[:n]...)
	if k := len(b.tail) - len(done); k > 0 {
		b.tail = append(b.tail[:0], b.tail[k:]...)
	}
	return n, err
}

// Close reads at most 1 MiB past where the client stopped: after [DONE]
// only the end of the chunked encoding and the trailers remain.
func (b *tailBody) Close() error {
	io.Copy(io.Discard, io.LimitReader(b, 1<<20))
	return b.rc.Close()
}
