package integration

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
	"github.com/otelenergy/otelenergy/simgpu"
)

// newSource is the one place these tests build an energy source.
func newSource(t *testing.T) otelenergy.Source {
	src, err := simgpu.New(simgpu.Config{Devices: 1})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// startApp builds the demo app, runs it on a free loopback port without
// its load generator, and stops it by PID when the test ends.
func startApp(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "app")
	// Built inside the example module, which works with the root's go.work
	// and with GOWORK=off alike.
	build := exec.Command("go", "build", "-o", bin, "./app")
	build.Dir = "../example"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./example/app: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-load=false", "-simulate", "-addr", "127.0.0.1:0", "-token-rate", "200", "-duration", "5m")
	// No exporter: the caller's OTEL_* variables would turn autoexport on.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") })
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`^listening on (http://[0-9.:]+)/`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(60 * time.Second):
		t.Fatal("the demo app did not start")
		return ""
	}
}

// gateway runs the proxy in front of backend inside otelhttp and the
// energy middleware, recording spans.
func gateway(t *testing.T, backend string, opts ...openaiproxy.Option) (string, *tracetest.SpanRecorder) {
	u, _ := url.Parse(backend)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	mp := sdkmetric.NewMeterProvider()
	mon, err := otelenergy.NewMonitor(newSource(t), otelenergy.WithMeterProvider(mp), otelenergy.WithInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	// A request that ends before the counter has stepped twice has no
	// measured power to be priced at: the gateway serves once the Monitor
	// has seen two steps (a bounded wait, not a deadline on the machine).
	for seen, last, i := 0, uint64(0), 0; seen < 2; i++ {
		if i == 3000 {
			t.Fatal("the gateway's Monitor saw fewer than two counter steps in 30 s")
		}
		if e := mon.Totals().TotalEnergyMJ(); e > last {
			seen, last = seen+1, e
		}
		time.Sleep(10 * time.Millisecond)
	}
	h := otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(openaiproxy.New(u, mon, append([]openaiproxy.Option{openaiproxy.WithMeterProvider(mp)}, opts...)...)), "gateway",
		otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp))
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		mon.Shutdown(context.Background())
	})
	return srv.URL, sr
}

func client(base string) (openai.Client, *http.Client) {
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	return openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithHTTPClient(hc), option.WithMaxRetries(0)), hc
}

// lastSpan waits for the gateway's span of the latest request.
func lastSpan(t *testing.T, sr *tracetest.SpanRecorder, n int) map[attribute.Key]attribute.Value {
	t.Helper()
	for range 200 {
		if spans := sr.Ended(); len(spans) >= n {
			attrs := map[attribute.Key]attribute.Value{}
			for _, kv := range spans[n-1].Attributes() {
				attrs[kv.Key] = kv.Value
			}
			return attrs
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("span %d did not end", n)
	return nil
}

func params() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     "llama-3.1-8b-instruct",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("How much energy does a token take?")},
		MaxTokens: openai.Int(12),
	}
}

func stream(t *testing.T, c openai.Client, p openai.ChatCompletionNewParams) (string, *openai.CompletionUsage) {
	t.Helper()
	s := c.Chat.Completions.NewStreaming(context.Background(), p)
	defer s.Close()
	var b strings.Builder
	var usage *openai.CompletionUsage
	for i := 0; s.Next() && i < 10000; i++ {
		ch := s.Current()
		for _, c := range ch.Choices {
			b.WriteString(c.Delta.Content)
		}
		if ch.Usage.TotalTokens > 0 {
			u := ch.Usage
			usage = &u
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String(), usage
}

func TestOpenAIClientThroughGateway(t *testing.T) {
	app := startApp(t)
	gw, sr := gateway(t, app)
	direct, dhc := client(app)
	viaGW, ghc := client(gw)
	defer dhc.CloseIdleConnections()
	defer ghc.CloseIdleConnections()

	checkSpan := func(t *testing.T, n int, usage openai.CompletionUsage) {
		attrs := lastSpan(t, sr, n)
		if got := attrs["gen_ai.usage.output_tokens"].AsInt64(); got != usage.CompletionTokens {
			t.Errorf("span output tokens %d, usage %d", got, usage.CompletionTokens)
		}
		if got := attrs["gen_ai.usage.input_tokens"].AsInt64(); got != usage.PromptTokens {
			t.Errorf("span input tokens %d, usage %d", got, usage.PromptTokens)
		}
		if mj, ok := attrs[otelenergy.EnergyMillijoulesKey]; !ok || mj.AsInt64() <= 0 {
			t.Errorf("span energy.millijoules %v (present %t), want > 0", mj.AsInt64(), ok)
		}
		if got := attrs[openaiproxy.ResponseModelKey].AsString(); got != "llama-3.1-8b-instruct" {
			t.Errorf("span gen_ai.response.model %q", got)
		}
	}

	var usage openai.CompletionUsage
	t.Run("non-streaming", func(t *testing.T) {
		want, err := direct.Chat.Completions.New(context.Background(), params())
		if err != nil {
			t.Fatal(err)
		}
		got, err := viaGW.Chat.Completions.New(context.Background(), params())
		if err != nil {
			t.Fatal(err)
		}
		if got.Choices[0].Message.Content != want.Choices[0].Message.Content || !sameUsage(got.Usage, want.Usage) || got.Usage.CompletionTokens != 12 {
			t.Fatalf("through the gateway %q %+v, direct %q %+v", got.Choices[0].Message.Content, got.Usage, want.Choices[0].Message.Content, want.Usage)
		}
		usage = got.Usage
		checkSpan(t, 1, got.Usage)
	})
	t.Run("streaming", func(t *testing.T) {
		want, wantUsage := stream(t, direct, params())
		got, gotUsage := stream(t, viaGW, params())
		if got != want || want == "" {
			t.Fatalf("through the gateway %q, direct %q", got, want)
		}
		if wantUsage != nil || gotUsage != nil {
			t.Fatalf("usage reached a client that did not ask: direct %v, gateway %v", wantUsage, gotUsage)
		}
		checkSpan(t, 2, usage)
	})
	t.Run("streaming with usage", func(t *testing.T) {
		p := params()
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		want, wantUsage := stream(t, direct, p)
		got, gotUsage := stream(t, viaGW, p)
		if got != want || wantUsage == nil || gotUsage == nil || !sameUsage(*gotUsage, *wantUsage) {
			t.Fatalf("through the gateway %q %+v, direct %q %+v", got, gotUsage, want, wantUsage)
		}
		checkSpan(t, 3, *gotUsage)
	})
}

func sameUsage(a, b openai.CompletionUsage) bool {
	return a.PromptTokens == b.PromptTokens && a.CompletionTokens == b.CompletionTokens && a.TotalTokens == b.TotalTokens
}
