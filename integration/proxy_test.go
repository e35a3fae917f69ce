package integration

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// startProxy builds cmd/otelenergy-proxy in the workspace, runs it with
// -simulate in front of backend, and stops it with SIGTERM when the test
// ends. It returns the proxied API's base URL.
func startProxy(t *testing.T, backend string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "otelenergy-proxy")
	work, err := filepath.Abs("../go.work")
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "../cmd/otelenergy-proxy"
	build.Env = append(os.Environ(), "GOWORK="+work) // the proxy's module resolves the library through the workspace
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/otelenergy-proxy: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-simulate", "-backend", backend, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-horizon", "1s")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") })
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the proxy exited: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Error("the proxy did not exit on SIGTERM")
		}
	})
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`msg="otelenergy-proxy serving" listen=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- "http://" + m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(60 * time.Second):
		t.Fatal("the proxy did not start")
		return ""
	}
}

// drainOnClose reads a response body to its end before closing it.
// openai-go closes a stream's body at [DONE], before the end of the body,
// and HTTP trailers are read only there.
func drainOnClose(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err == nil {
		resp.Body = drainer{resp.Body}
	}
	return resp, err
}

type drainer struct{ io.ReadCloser }

func (d drainer) Close() error {
	io.Copy(io.Discard, io.LimitReader(d.ReadCloser, 1<<20))
	return d.ReadCloser.Close()
}

// TestProxyTrailersThroughOpenAIClient reads the proxy's energy trailers
// through the official openai-go client, streamed and not, over HTTP/1.1
// and h2c, in front of the demo app.
func TestProxyTrailersThroughOpenAIClient(t *testing.T) {
	app := startApp(t)
	base := startProxy(t, app)
	// A cold Monitor estimates unsplit intervals from the recent power,
	// which takes a few counter steps to learn.
	time.Sleep(time.Second)
	for _, h2c := range []bool{false, true} {
		tr := &http.Transport{}
		if h2c {
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			tr.Protocols = &p
		}
		hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		c := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithHTTPClient(hc),
			option.WithMaxRetries(0), option.WithMiddleware(drainOnClose))
		p := params()
		p.MaxTokens = openai.Int(40) // long enough to span several counter steps
		check := func(name string, resp *http.Response) {
			t.Helper()
			if resp == nil {
				t.Fatalf("%s: no response captured", name)
			}
			if want := map[bool]int{false: 1, true: 2}[h2c]; resp.ProtoMajor != want {
				t.Fatalf("%s: %s, want HTTP/%d", name, resp.Proto, want)
			}
			mj, err := strconv.ParseUint(resp.Trailer.Get("Energy-Millijoules"), 10, 64)
			approx := resp.Trailer.Get("Energy-Approximate")
			if err != nil || mj == 0 || (approx != "true" && approx != "false") {
				t.Fatalf("%s: trailers %v; want Energy-Millijoules > 0 and Energy-Approximate", name, resp.Trailer)
			}
			t.Logf("%s: %s Energy-Millijoules=%d Energy-Approximate=%s", name, resp.Proto, mj, approx)
		}
		var whole *http.Response
		got, err := c.Chat.Completions.New(context.Background(), p, option.WithResponseInto(&whole))
		if err != nil {
			t.Fatal(err)
		}
		if got.Usage.CompletionTokens != 40 {
			t.Fatalf("usage %+v", got.Usage)
		}
		check("non-streaming", whole)

		var streamed *http.Response
		s := c.Chat.Completions.NewStreaming(context.Background(), p, option.WithResponseInto(&streamed))
		n := 0
		for s.Next() {
			n++
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if n < 40 {
			t.Fatalf("%d chunks", n)
		}
		check("streaming", streamed)
		hc.CloseIdleConnections()
	}
}
