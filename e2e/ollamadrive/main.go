// Command ollamadrive sends completions to an OpenAI-compatible server
// (Ollama, directly or through otelenergy-proxy) with the official
// openai-go client and prints one JSON line per completion: what the
// client got (status, usage, finish reasons, text, the raw body of a
// whole response, the energy trailers). The Ollama e2e test
// (e2e/ollama_test.go) runs it as a process, so that the e2e module stays
// free of the client, whose dependencies would move Jaeger's; it asserts
// on the lines.
//
//	ollamadrive -url http://127.0.0.1:8080 -model tiny basic
//	ollamadrive -url ... soak -streams 8 -duration 30s
//	ollamadrive -url ... disconnect
//	ollamadrive -url ... drain
//
// basic sends chat and text completions, whole and streamed (streams ask
// for usage), and whole with logprobs, at temperature 0 with a seed, each with a traceparent of its
// own whose trace id it prints, so that the proxy's log line of each can
// be found. soak runs -streams concurrent chat streams, one after another
// on each, until -duration has passed. disconnect reads a few chunks of a
// long stream and goes away. drain prints {"event":"first_chunk"} when a
// long stream's first chunk arrives, for the test to signal the proxy,
// and reads the stream to its end.
//
// A completion is good when its status is 200, it ran to max_tokens
// (finish_reason length, usage.completion_tokens = max_tokens) and, with
// -trailers, it carries Energy-Millijoules and Energy-Approximate. The
// exit status is 0 when every completion is good, 1 when one is not (after
// every line), 2 for invalid arguments.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
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
	url, model     string
	maxTokens      int
	longTokens     int
	seed           int64
	trailers       bool
	streams        int
	duration       time.Duration
	requestTimeout time.Duration
}

// Line is one completion as the client saw it, or an event.
type Line struct {
	Event            string          `json:"event,omitempty"`
	Name             string          `json:"name,omitempty"`
	Worker           int             `json:"worker,omitempty"`
	TraceID          string          `json:"trace_id,omitempty"`
	Status           int             `json:"status"`
	PromptTokens     int64           `json:"prompt_tokens"`
	CompletionTokens int64           `json:"completion_tokens"`
	FinishReasons    []string        `json:"finish_reasons,omitempty"`
	Chunks           int             `json:"chunks"`
	Text             string          `json:"text"`
	Body             json.RawMessage `json:"body,omitempty"`
	EnergyMJ         string          `json:"energy_millijoules,omitempty"`
	Approximate      string          `json:"energy_approximate,omitempty"`
	Error            string          `json:"error,omitempty"`
}

// The prompts: short, so that every run's prompt tokens are few and
// equal.
const (
	chatPrompt = "How much energy does a token take?"
	textPrompt = "Energy per token is"
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ollamadrive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.url, "url", "", "base URL of the server; the API is under /v1/ (required)")
	fs.StringVar(&cfg.model, "model", "tiny", "model")
	fs.IntVar(&cfg.maxTokens, "max-tokens", 32, "max_tokens of basic's and soak's completions")
	fs.IntVar(&cfg.longTokens, "long-tokens", 400, "max_tokens of disconnect's and drain's streams")
	fs.Int64Var(&cfg.seed, "seed", 42, "seed of every completion")
	fs.BoolVar(&cfg.trailers, "trailers", true, "require the proxy's energy trailers")
	fs.IntVar(&cfg.streams, "streams", 8, "soak: concurrent streams")
	fs.DurationVar(&cfg.duration, "duration", 30*time.Second, "soak: how long new streams start")
	fs.DurationVar(&cfg.requestTimeout, "request-timeout", 5*time.Minute, "bound on each completion: only a broken run reaches it")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cfg.url == "" || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "ollamadrive: -url and one scenario (basic, soak, disconnect, drain) are required")
		return 2
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	d := &driver{cfg: cfg, enc: json.NewEncoder(stdout), stderr: stderr,
		c: openai.NewClient(option.WithBaseURL(cfg.url+"/v1/"), option.WithAPIKey("unused"),
			option.WithHTTPClient(hc), option.WithMaxRetries(0))} // a retry would hide a failure
	switch fs.Arg(0) {
	case "basic":
		d.basic(ctx)
	case "soak":
		d.soak(ctx)
	case "disconnect":
		d.disconnect(ctx)
	case "drain":
		d.drain(ctx)
	default:
		fmt.Fprintf(stderr, "ollamadrive: unknown scenario %q\n", fs.Arg(0))
		return 2
	}
	if d.failed > 0 {
		fmt.Fprintf(stderr, "ollamadrive: %d of %d completions failed\n", d.failed, d.total)
		return 1
	}
	return 0
}

type driver struct {
	cfg    config
	c      openai.Client
	stderr io.Writer

	mu            sync.Mutex
	enc           *json.Encoder
	failed, total int
}

// print writes l; a completion counts as failed when it has an error.
func (d *driver) print(l Line) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.Event == "" {
		d.total++
		if l.Error != "" {
			d.failed++
		}
	}
	if err := d.enc.Encode(l); err != nil {
		fmt.Fprintln(d.stderr, "ollamadrive:", err)
		d.failed++
	}
}

// request is one completion to send.
type request struct {
	name      string
	chat      bool
	stream    bool
	maxTokens int
	logprobs  bool // ask for the tokens' log probabilities, two alternatives each
}

func (d *driver) basic(ctx context.Context) {
	n := d.cfg.maxTokens
	for _, r := range []request{
		{"chat", true, false, n, false},
		{"chat-stream", true, true, n, false},
		{"chat-logprobs", true, false, n, true},
		{"completion", false, false, n, false},
		{"completion-stream", false, true, n, false},
		{"completion-logprobs", false, false, n, true},
	} {
		d.print(d.send(ctx, r, nil))
	}
}

func (d *driver) soak(ctx context.Context) {
	end := time.Now().Add(d.cfg.duration)
	var wg sync.WaitGroup
	for w := range d.cfg.streams {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				l := d.send(ctx, request{name: "soak", chat: true, stream: true, maxTokens: d.cfg.maxTokens}, nil)
				l.Worker = w
				l.Text = "" // the lines stay short
				d.print(l)
			}
		})
	}
	wg.Wait()
}

// disconnect reads three content chunks of a long stream and cancels it.
func (d *driver) disconnect(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := d.send(ctx, request{name: "disconnect", chat: true, stream: true, maxTokens: d.cfg.longTokens}, func(chunks int) {
		if chunks == 3 {
			cancel()
		}
	})
	// The cut is the point: a stream that ran to its end is the failure.
	// The client may still read the chunks its transport had buffered when
	// it went away, so at least three are read; the error says whether the
	// stream was cut.
	switch {
	case l.Chunks < 3:
		l.Error = fmt.Sprintf("%d chunks read before going away, want at least 3 (%s)", l.Chunks, l.Error)
	case !strings.Contains(l.Error, "context canceled"):
		l.Error = "the stream was not cut: " + l.Error
	default:
		l.Error = ""
	}
	d.print(l)
}

// drain announces a long stream's first chunk and reads it to its end.
func (d *driver) drain(ctx context.Context) {
	d.print(d.send(ctx, request{name: "drain", chat: true, stream: true, maxTokens: d.cfg.longTokens}, func(chunks int) {
		if chunks == 1 {
			d.print(Line{Event: "first_chunk"})
		}
	}))
}

// send sends r and checks what came back. onChunk, when set, is called
// after each content chunk of a stream with the count so far.
func (d *driver) send(ctx context.Context, r request, onChunk func(int)) Line {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.requestTimeout)
	defer cancel()
	l := Line{Name: r.name, TraceID: newTraceID()}
	var resp *http.Response
	var body bytes.Buffer
	opts := []option.RequestOption{
		option.WithHeader("traceparent", "00-"+l.TraceID+"-"+newSpanID()+"-01"),
		option.WithResponseInto(&resp),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			res, err := next(req)
			if err == nil {
				res.Body = &teeBody{rc: res.Body, buf: &body}
			}
			return res, err
		}),
	}
	var err error
	var text strings.Builder
	usage := func(u openai.CompletionUsage) {
		l.PromptTokens, l.CompletionTokens = u.PromptTokens, u.CompletionTokens
	}
	// chunk takes one streamed choice's text and finish reason.
	chunk := func(content, finish string) {
		if finish != "" {
			l.FinishReasons = append(l.FinishReasons, finish)
		}
		if content != "" {
			text.WriteString(content)
			l.Chunks++
			if onChunk != nil {
				onChunk(l.Chunks)
			}
		}
	}
	switch {
	case r.chat && !r.stream:
		var c *openai.ChatCompletion
		if c, err = d.c.Chat.Completions.New(ctx, d.chatParams(r), opts...); err == nil {
			usage(c.Usage)
			for _, ch := range c.Choices {
				l.FinishReasons = append(l.FinishReasons, ch.FinishReason)
				text.WriteString(ch.Message.Content)
			}
		}
	case r.chat:
		p := d.chatParams(r)
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		s := d.c.Chat.Completions.NewStreaming(ctx, p, opts...)
		for s.Next() {
			ch := s.Current()
			if ch.JSON.Usage.Valid() && ch.Usage.CompletionTokens > 0 {
				usage(ch.Usage)
			}
			for _, c := range ch.Choices {
				chunk(c.Delta.Content, c.FinishReason)
			}
		}
		err = s.Err()
		s.Close()
	case !r.stream:
		var c *openai.Completion
		if c, err = d.c.Completions.New(ctx, d.textParams(r), opts...); err == nil {
			usage(c.Usage)
			for _, ch := range c.Choices {
				l.FinishReasons = append(l.FinishReasons, string(ch.FinishReason))
				text.WriteString(ch.Text)
			}
		}
	default:
		p := d.textParams(r)
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		s := d.c.Completions.NewStreaming(ctx, p, opts...)
		for s.Next() {
			ch := s.Current()
			// Ollama puts a zeroed usage into every chunk once usage is
			// asked for; the last one holds the counts.
			if ch.JSON.Usage.Valid() && ch.Usage.CompletionTokens > 0 {
				usage(ch.Usage)
			}
			for _, c := range ch.Choices {
				chunk(c.Text, string(c.FinishReason))
			}
		}
		err = s.Err()
		s.Close()
	}
	l.Text = text.String()
	if resp != nil {
		l.Status = resp.StatusCode
		l.EnergyMJ, l.Approximate = resp.Trailer.Get("Energy-Millijoules"), resp.Trailer.Get("Energy-Approximate")
		if !r.stream && json.Valid(body.Bytes()) {
			l.Body = json.RawMessage(bytes.Clone(body.Bytes()))
		}
	}
	l.Error = d.check(l, r, err)
	return l
}

// check returns what is wrong with a completion, or "".
func (d *driver) check(l Line, r request, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case l.Status != http.StatusOK:
		return fmt.Sprintf("status %d", l.Status)
	case len(l.FinishReasons) != 1 || l.FinishReasons[0] != "length":
		return fmt.Sprintf("finish reasons %q, want one, \"length\"", l.FinishReasons)
	case l.CompletionTokens != int64(r.maxTokens) || l.PromptTokens <= 0:
		return fmt.Sprintf("usage: %d prompt and %d completion tokens, want some and %d", l.PromptTokens, l.CompletionTokens, r.maxTokens)
	case r.stream && l.Chunks == 0:
		return "a stream without content chunks"
	}
	if d.cfg.trailers {
		if _, err := strconv.ParseUint(l.EnergyMJ, 10, 64); err != nil {
			return fmt.Sprintf("trailer Energy-Millijoules %q: %v", l.EnergyMJ, err)
		}
		if l.Approximate != "true" && l.Approximate != "false" {
			return fmt.Sprintf("trailer Energy-Approximate %q, want true or false", l.Approximate)
		}
	}
	return ""
}

func (d *driver) chatParams(r request) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:       d.cfg.model,
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(chatPrompt)},
		MaxTokens:   openai.Int(int64(r.maxTokens)),
		Temperature: openai.Float(0),
		Seed:        openai.Int(d.cfg.seed),
	}
	if r.logprobs {
		p.Logprobs, p.TopLogprobs = openai.Bool(true), openai.Int(2)
	}
	return p
}

func (d *driver) textParams(r request) openai.CompletionNewParams {
	p := openai.CompletionNewParams{
		Model:       openai.CompletionNewParamsModel(d.cfg.model),
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(textPrompt)},
		MaxTokens:   openai.Int(int64(r.maxTokens)),
		Temperature: openai.Float(0),
		Seed:        openai.Int(d.cfg.seed),
	}
	if r.logprobs {
		p.Logprobs = openai.Int(2)
	}
	return p
}

// teeBody copies what the client reads into buf, and reads the rest on
// Close: openai-go closes a stream's body at [DONE], and Go's client
// fills Response.Trailer only at the end of the body.
type teeBody struct {
	rc  io.ReadCloser
	buf *bytes.Buffer
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.buf.Write(p[:n])
	return n, err
}

// Close reads at most 1 MiB past where the client stopped.
func (b *teeBody) Close() error {
	io.Copy(io.Discard, io.LimitReader(b, 1<<20))
	return b.rc.Close()
}

func newTraceID() string { return randomHex(16) }
func newSpanID() string  { return randomHex(8) }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
