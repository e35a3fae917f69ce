package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
	"github.com/otelenergy/otelenergy/otelenergy"
)

func TestHelpListsEveryFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"-h"}, Env{Stdout: &out, Stderr: &errOut}); code != 0 {
		t.Fatalf("-h exited %d", code)
	}
	for _, name := range flags.Names() {
		i := strings.Index(out.String(), "  -"+name+" ")
		if i < 0 {
			i = strings.Index(out.String(), "  -"+name+"\n")
		}
		if i < 0 {
			t.Fatalf("-h does not document -%s:\n%s", name, out.String())
		}
		block := out.String()[i+1:]
		if j := strings.Index(block, "\n  -"); j >= 0 {
			block = block[:j]
		}
		if !strings.Contains(block, "(default ") || !strings.Contains(block, flags.Env(name)) {
			t.Fatalf("-%s lacks its default or its variable %s: %q", name, flags.Env(name), block)
		}
	}
}

// TestVersion checks -version's line and the build logged at start.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"-version"}, Env{Stdout: &out, Stderr: &errOut}); code != 0 || strings.Count(out.String(), "\n") != 1 ||
		!strings.Contains(out.String(), runtime.Version()) || !strings.Contains(out.String(), "revision") {
		t.Fatalf("-version: status %d, %q", code, out.String())
	}
	r := start(t, []string{"-simulate", "-backend", newTestBackend(t)}, nil)
	if !strings.Contains(r.stderr.String(), "build.version=") || !strings.Contains(r.stderr.String(), "build.go="+runtime.Version()) {
		t.Fatalf("the start does not log the build:\n%s", r.stderr)
	}
}

func TestInvalidValueExits2(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"-backend", "localhost:8000"}, want: "-backend"},
		{args: []string{"-log-format", "xml"}, want: "-log-format"},
		{args: []string{"-drain-timeout", "-1s"}, want: "-drain-timeout"},
		{args: []string{"-backend-pid", "abc"}, want: "-backend-pid"},
		{args: []string{"-listen", "8080"}, want: "-listen"},
		{args: []string{"-no-such-flag"}, want: "no-such-flag"},
		{args: []string{"vllm"}, want: "after --"},
		{args: []string{"-simulate", "--"}, want: "no command"},
		{args: []string{"-shutdown-delay", "-1s"}, want: "-shutdown-delay"},
		{args: []string{"-baggage-keys", "a,b,c,d,e,f,g,h,i"}, want: "-baggage-keys"},
		{env: map[string]string{"OTELENERGY_DRAIN_TIMEOUT": "soon"}, want: "OTELENERGY_DRAIN_TIMEOUT"},
	} {
		var out, errOut bytes.Buffer
		code := Main(c.args, Env{Stdout: &out, Stderr: &errOut, LookupEnv: func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }})
		msg := errOut.String()
		if code != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, c.want) {
			t.Errorf("%v %v: status %d, stderr %q; want 2 and one line naming %s", c.args, c.env, code, msg, c.want)
		}
	}
}

// TestBaggageKeyLimitMatchesLibrary keeps the flag table's bound equal
// to the library's.
func TestBaggageKeyLimitMatchesLibrary(t *testing.T) {
	keys := make([]string, otelenergy.MaxBaggageKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	if _, err := flags.Parse([]string{"-baggage-keys", strings.Join(keys, ",")}, func(string) string { return "" }, nil); err != nil {
		t.Fatalf("%d keys rejected: %v", len(keys), err)
	}
	if _, err := flags.Parse([]string{"-baggage-keys", strings.Join(append(keys, "one-more"), ",")}, func(string) string { return "" }, nil); err == nil {
		t.Fatalf("%d keys accepted", len(keys)+1)
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	cfg, err := flags.Parse([]string{"-drain-timeout", "3s"}, func(k string) string {
		return map[string]string{"OTELENERGY_DRAIN_TIMEOUT": "9s", "OTELENERGY_BAGGAGE_KEYS": "tenant, team", "OTELENERGY_TRAILERS": "false"}[k]
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DrainTimeout != 3*time.Second || len(cfg.BaggageKeys) != 2 || cfg.BaggageKeys[1] != "team" || cfg.Trailers {
		t.Fatalf("got %+v; want the flag over the variable, and the variables elsewhere", cfg)
	}
}

// TestNoSilentFallback runs the proxy without -simulate on a machine
// without NVML (this one; on a GPU host the proxy would start and the
// test is skipped).
func TestNoSilentFallback(t *testing.T) {
	var out, errOut syncBuffer
	sig := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() {
		done <- Main([]string{"-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0"}, Env{Stdout: &out, Stderr: &errOut,
			Signals: sig,
			Started: func(api, admin net.Addr) { sig <- syscall.SIGTERM }})
	}()
	code := <-done
	if code == 0 && strings.Contains(errOut.String(), "source=nvml") {
		t.Skip("NVML is present here")
	}
	if code != 1 || !strings.Contains(errOut.String(), "NVML is not available") || !strings.Contains(errOut.String(), "-simulate") {
		t.Fatalf("status %d, log:\n%s\nwant 1 and a message naming NVML and -simulate", code, errOut.String())
	}
}

// TestServeSimulated proxies streamed and whole completions to a
// backend and checks what the caller and the telemetry see: the bytes,
// the trailers, readiness, the resource, the log, and the server span's
// energy.
func TestServeSimulated(t *testing.T) {
	col := newCollector(t)
	b := httptest.NewServer(&backend{tokens: 12, pace: 20 * time.Millisecond})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-horizon", "1s"}, nil)
	waitReady(t, r.admin)
	if !strings.Contains(r.stderr.String(), "simulated GPU") {
		t.Fatalf("the log does not say the GPU is simulated:\n%s", r.stderr)
	}
	c := &http.Client{}
	for _, stream := range []bool{true, false} {
		resp, body := post(t, context.Background(), c, r.api, stream)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if stream && (bytes.Contains(body, []byte(`"usage"`)) || !bytes.HasSuffix(body, []byte("data: [DONE]\n\n"))) {
			t.Fatalf("stream body %q: want the backend's stream without the usage chunk", body)
		}
		mj, err := strconv.ParseUint(resp.Trailer.Get("Energy-Millijoules"), 10, 64)
		if err != nil || mj == 0 || resp.Trailer.Get("Energy-Approximate") == "" {
			t.Fatalf("trailers %v: want Energy-Millijoules > 0 and Energy-Approximate", resp.Trailer)
		}
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit status %d after SIGTERM:\n%s", code, r.stderr)
	}
	spans := col.serverSpans()
	if len(spans) != 2 {
		t.Fatalf("%d server spans exported, want 2", len(spans))
	}
	for _, s := range spans {
		v, ok := attr(s.Attributes, "energy.millijoules")
		if !ok || v.GetIntValue() <= 0 || s.Name != "POST /v1/chat/completions" {
			t.Fatalf("span %q attributes %v: want energy.millijoules > 0", s.Name, s.Attributes)
		}
		if v, _ := attr(s.Attributes, "gen_ai.usage.output_tokens"); v.GetIntValue() != 12 {
			t.Fatalf("span output tokens %v, want the usage, 12", v)
		}
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if v, ok := attr(col.res, "otelenergy.source"); !ok || v.GetStringValue() != "simulated" {
		t.Fatalf("resource %v: want otelenergy.source=simulated", col.res)
	}
	if v, _ := attr(col.res, "service.name"); v.GetStringValue() != serviceName {
		t.Fatalf("service.name %v", v)
	}
}

// TestBackendDownStillMetered checks that a request to a backend that
// refuses connections gets a 502 with an OpenAI-style body, and its
// span still has its energy.
func TestBackendDownStillMetered(t *testing.T) {
	col := newCollector(t)
	b := httptest.NewServer(&backend{})
	url := b.URL
	r := start(t, []string{"-simulate", "-backend", url, "-horizon", "1s"}, nil)
	waitReady(t, r.admin)
	b.Close()
	time.Sleep(150 * time.Millisecond) // a request longer than the counter's period
	resp, body := post(t, context.Background(), http.DefaultClient, r.api, true)
	var e struct {
		Error struct{ Type, Message string }
	}
	if resp.StatusCode != http.StatusBadGateway || json.Unmarshal(body, &e) != nil || e.Error.Type != "upstream_error" {
		t.Fatalf("status %d body %s: want 502 with an OpenAI-style error", resp.StatusCode, body)
	}
	r.stop(t)
	spans := col.serverSpans()
	if len(spans) != 1 {
		t.Fatalf("%d server spans", len(spans))
	}
	if _, ok := attr(spans[0].Attributes, "energy.millijoules"); !ok {
		t.Fatalf("the failed request's span has no energy: %v", spans[0].Attributes)
	}
}

func TestClientDisconnectCancelsBackend(t *testing.T) {
	be := &backend{block: true, canceled: make(chan struct{}, 1), started: make(chan struct{}, 1)}
	b := httptest.NewServer(be)
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-horizon", "1s"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-be.started
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.api+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the request was answered")
	}
	select {
	case <-be.canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's request was not canceled when the client left")
	}
}

func TestRequestBodyLimit(t *testing.T) {
	b := httptest.NewServer(&backend{})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-max-request-bytes", "64"}, nil)
	for _, chunked := range []bool{false, true} {
		body := strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 100) + `"}]}`)
		req, _ := http.NewRequest(http.MethodPost, r.api+"/v1/chat/completions", body)
		if chunked {
			req.ContentLength = -1 // no declared length: the limit applies as the body is read
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error struct{ Type string } }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || e.Error.Type != "invalid_request_error" {
			t.Fatalf("chunked=%t: status %d, error %+v; want 413", chunked, resp.StatusCode, e)
		}
	}
}

// TestDrainOnSIGTERM starts a slow stream, sends SIGTERM while it runs,
// and checks that the stream completes, readiness drops, new connections
// are refused, and the exit status is 0.
func TestDrainOnSIGTERM(t *testing.T) {
	b := httptest.NewServer(&backend{tokens: 40, pace: 20 * time.Millisecond})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-horizon", "1s"}, nil)
	waitReady(t, r.admin)
	type result struct {
		resp *http.Response
		body []byte
	}
	got := make(chan result, 1)
	go func() {
		resp, body := post(t, context.Background(), &http.Client{}, r.api, true)
		got <- result{resp, body}
	}()
	time.Sleep(200 * time.Millisecond)
	r.sig <- syscall.SIGTERM
	time.Sleep(100 * time.Millisecond)
	if resp, err := http.Get(r.admin + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("ready while draining")
		}
	}
	if _, err := http.Post(r.api+"/v1/chat/completions", "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("a new request was accepted while draining")
	}
	res := <-got
	if res.resp.StatusCode != 200 || !bytes.HasSuffix(res.body, []byte("data: [DONE]\n\n")) || res.resp.Trailer.Get("Energy-Millijoules") == "" {
		t.Fatalf("the in-flight stream did not finish: status %d, %d bytes, trailers %v", res.resp.StatusCode, len(res.body), res.resp.Trailer)
	}
	if code := <-r.code; code != 0 {
		t.Fatalf("exit status %d", code)
	}
	r.code <- 0
}

func TestCopyTo(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "otelenergy-proxy")
	var out bytes.Buffer
	if code := Main([]string{"-copy-to", dst}, Env{Stdout: &out, Stderr: &out}); code != 0 {
		t.Fatalf("status %d: %s", code, out.String())
	}
	self, _ := os.Executable()
	a, _ := os.ReadFile(self)
	b, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("the copy differs from the executable (%v)", err)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm()&0o111 != 0o111 {
		t.Fatalf("mode %v, want executable by all", fi.Mode())
	}
}

// TestDoctor runs the node check as the proxy's first argument with an
// exporter endpoint that does not answer: it fails with a fix, and does
// not fail on the PID namespace,
// which the proxy does not need to share with the host.
func TestDoctor(t *testing.T) {
	var out, errOut bytes.Buffer
	env := map[string]string{
		"OTEL_METRICS_EXPORTER":       "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + freeAddr(t),
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code := Main([]string{DoctorCommand, "-window", "200ms"}, Env{Stdout: &out, Stderr: &errOut, LookupEnv: lookup})
	text := out.String() + errOut.String()
	if code != 1 {
		t.Fatalf("doctor exited %d, want 1:\n%s", code, text)
	}
	for _, want := range []string{"metrics exporter", "fix:"} {
		if !strings.Contains(text, want) {
			t.Fatalf("doctor's report lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "FAIL  PID namespace") {
		t.Fatalf("the proxy's doctor failed the PID namespace:\n%s", text)
	}
}

// TestServeFinalTrailers: with -trailers=final, each response's
// Energy-Millijoules trailer is its span's energy.millijoules, streamed
// and whole: the flags reach openaiproxy.WithFinalTrailers.
func TestServeFinalTrailers(t *testing.T) {
	col := newCollector(t)
	b := httptest.NewServer(&backend{tokens: 12, pace: 20 * time.Millisecond})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-horizon", "200ms", "-trailers=final", "-final-wait", "5s"}, nil)
	waitReady(t, r.admin)
	c := &http.Client{}
	var trailers []int64
	for _, stream := range []bool{true, false} {
		resp, body := post(t, context.Background(), c, r.api, stream)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		mj, err := strconv.ParseInt(resp.Trailer.Get("Energy-Millijoules"), 10, 64)
		if err != nil || mj <= 0 {
			t.Fatalf("trailers %v: want Energy-Millijoules > 0", resp.Trailer)
		}
		trailers = append(trailers, mj)
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit status %d after SIGTERM:\n%s", code, r.stderr)
	}
	spans := col.serverSpans()
	if len(spans) != 2 {
		t.Fatalf("%d server spans exported, want 2", len(spans))
	}
	var figures []int64
	for _, s := range spans {
		v, _ := attr(s.Attributes, "energy.millijoules")
		figures = append(figures, v.GetIntValue())
	}
	slices.Sort(figures)
	slices.Sort(trailers)
	for i := range figures {
		if d := trailers[i] - figures[i]; d*1000 > figures[i] || -d*1000 > figures[i] {
			t.Fatalf("trailers %v mJ, spans' energy.millijoules %v: more than 0.1%% apart", trailers, figures)
		}
	}
}
