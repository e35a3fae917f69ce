package openaiproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// trailerRig serves the energy middleware around the proxy, with energy
// trailers on, over HTTP/1.1 and unencrypted HTTP/2, and captures each
// request's Result as the middleware's End reports it.
type trailerRig struct {
	srv     *httptest.Server
	results chan otelenergy.Result
}

func newTrailerRig(t *testing.T, backend http.Handler, opts ...otelenergy.Option) *trailerRig {
	t.Helper()
	b := httptest.NewServer(backend)
	t.Cleanup(b.Close)
	u, _ := url.Parse(b.URL)
	mon := newMonitor(t, opts...)
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	p := openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider()), openaiproxy.WithEnergyTrailers(true))
	tr := &trailerRig{results: make(chan otelenergy.Result, 4)}
	capture := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.ServeHTTP(w, r)
		tr.results <- otelenergy.RequestFromContext(r.Context()).End()
	})
	tr.srv = httptest.NewUnstartedServer(otelenergy.NewMiddleware(mon)(capture))
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	tr.srv.Config.Protocols = &protos
	tr.srv.Start()
	t.Cleanup(tr.srv.Close)
	return tr
}

func clientFor(h2c bool) *http.Client {
	tr := &http.Transport{DisableCompression: true}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	return &http.Client{Transport: tr}
}

// TestEnergyTrailers reads the trailers of streamed and whole completions
// over HTTP/1.1 and h2c, and of a completion whose backend is down, and
// compares them with what the request's End reported when the response
// ended: the same figure, the body untouched. With carbon, the
// Energy-Co2e-Milligrams trailer is announced and carries End's µg as mg
// with three decimals; without, it is neither announced nor sent.
func TestEnergyTrailers(t *testing.T) {
	for _, withCarbon := range []bool{false, true} {
		for _, h2c := range []bool{false, true} {
			for _, mode := range []string{"stream", "whole", "rebuilt"} {
				name := map[bool]string{false: "http1", true: "h2c"}[h2c] + "/" + mode
				if withCarbon {
					name += "/carbon"
				}
				t.Run(name, func(t *testing.T) { testEnergyTrailers(t, h2c, mode, withCarbon) })
			}
		}
	}
}

// testEnergyTrailers runs one case: mode is stream (a streaming client),
// whole (a backend that answers a whole body) or rebuilt (a whole body
// the proxy rebuilds from the stream it asked the backend for).
func testEnergyTrailers(t *testing.T, h2c bool, mode string, withCarbon bool) {
	var opts []otelenergy.Option
	if withCarbon {
		opts = append(opts, otelenergy.WithCarbon(staticModel(t, 436_000)))
	}
	stream := mode == "stream"
	s := &script{tokens: 20, prompt: 9, json: mode == "whole", honour: mode == "rebuilt", pace: 5 * time.Millisecond}
	tr := newTrailerRig(t, s, opts...)
	c := clientFor(h2c)
	defer c.CloseIdleConnections()
	resp, err := c.Post(tr.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatRequest(stream, "")))
	if err != nil {
		t.Fatal(err)
	}
	// The client takes the announced trailers' names out of the header
	// into resp.Trailer, with no value until the body is read.
	_, announced := resp.Trailer[http.CanonicalHeaderKey(openaiproxy.TrailerCo2e)]
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{false: 1, true: 2}[h2c]; resp.ProtoMajor != want {
		t.Fatalf("protocol %s, want HTTP/%d", resp.Proto, want)
	}
	// A stated length would let a client end the response at its
	// last byte and never read the trailers (curl does, over h2).
	if resp.ContentLength != -1 {
		t.Fatalf("Content-Length %d on a response with trailers, want none", resp.ContentLength)
	}
	switch mode {
	case "rebuilt":
		if c := rebuiltContent(t, body); c != scriptContent(20) || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("rebuilt content %q (%s), want %q", c, resp.Header.Get("Content-Type"), scriptContent(20))
		}
	default:
		want := chatJSON(9, 20)
		if stream {
			want = strings.Join(s.events(false), "")
		}
		if string(body) != want {
			t.Fatalf("body\n%q\nwant\n%q", body, want)
		}
	}
	res := <-tr.results
	if !res.HasEnergy {
		t.Fatal("the request got no energy")
	}
	if got := resp.Trailer.Get(openaiproxy.TrailerEnergy); got != strconv.FormatUint(res.EnergyMJ, 10) {
		t.Fatalf("%s trailer %q, want End's %d mJ (trailers %v)", openaiproxy.TrailerEnergy, got, res.EnergyMJ, resp.Trailer)
	}
	if got := resp.Trailer.Get(openaiproxy.TrailerApproximate); got != strconv.FormatBool(res.Approximate) {
		t.Fatalf("%s trailer %q, want %t", openaiproxy.TrailerApproximate, got, res.Approximate)
	}
	got := resp.Trailer.Values(openaiproxy.TrailerCo2e)
	sent := len(got) > 0
	if !withCarbon {
		if announced || sent || res.HasCo2e {
			t.Fatalf("carbon off: %s announced %v, sent %q, End's HasCo2e %v; want none", openaiproxy.TrailerCo2e, announced, got, res.HasCo2e)
		}
		return
	}
	if !announced || !res.HasCo2e {
		t.Fatalf("carbon on: %s announced %v, End's HasCo2e %v; want both", openaiproxy.TrailerCo2e, announced, res.HasCo2e)
	}
	wantCo2 := fmt.Sprintf("%d.%03d", res.Co2eMicrograms/1000, res.Co2eMicrograms%1000)
	if len(got) != 1 || got[0] != wantCo2 {
		t.Fatalf("%s trailer %q, want End's %d µg as %q", openaiproxy.TrailerCo2e, got, res.Co2eMicrograms, wantCo2)
	}
	if res.EnergyMJ > 0 && res.Co2eMicrograms == 0 {
		t.Fatalf("%d mJ at 436 g/kWh gave 0 µg", res.EnergyMJ)
	}
	t.Logf("%s %s mJ, %s %s mg", openaiproxy.TrailerEnergy, resp.Trailer.Get(openaiproxy.TrailerEnergy), openaiproxy.TrailerCo2e, got[0])
}

// staticModel returns a carbon model at a static intensity of mg per
// kWh, with a PUE of 1.
func staticModel(t testing.TB, mg uint64) *carbon.Model {
	t.Helper()
	m, err := carbon.NewModel(carbon.NewStatic(carbon.Intensity{MgPerKWh: mg}))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// syncBuf is a bytes.Buffer safe for the proxy's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWriteErrorClientGone checks that a request whose client went away
// is answered 499, not 502 or 504, whatever the upstream error says.
func TestWriteErrorClientGone(t *testing.T) {
	for _, c := range []struct {
		name   string
		cancel bool
		err    error
		want   int
	}{
		{"client gone, upstream canceled", true, context.Canceled, openaiproxy.StatusClientClosedRequest},
		{"client gone, deadline", true, context.DeadlineExceeded, openaiproxy.StatusClientClosedRequest},
		{"client here, deadline", false, context.DeadlineExceeded, http.StatusGatewayTimeout},
		{"client here, refused", false, errors.New("dial tcp 10.0.0.7:8000: connect: connection refused"), http.StatusBadGateway},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if c.cancel {
				cancel()
			}
			defer cancel()
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", nil)
			w := httptest.NewRecorder()
			openaiproxy.WriteError(w, r, c.err)
			if w.Code != c.want || strings.Contains(w.Body.String(), "10.0.0.7") {
				t.Fatalf("status %d, body %s; want %d and no address", w.Code, w.Body, c.want)
			}
		})
	}
}

// TestBackendDownOpenAIError checks that a backend refusing connections
// gives a 502 with an OpenAI-style error body that does not carry the
// backend's address, the dial error on the caller's logger, and trailers
// still.
func TestBackendDownOpenAIError(t *testing.T) {
	b := httptest.NewServer(http.NotFoundHandler())
	u, _ := url.Parse(b.URL)
	b.Close() // nothing listens there now
	mon := newMonitor(t)
	mon.Start()
	var logged syncBuf
	p := openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider()), openaiproxy.WithEnergyTrailers(true),
		openaiproxy.WithErrorLog(log.New(&logged, "", 0)))
	srv := httptest.NewServer(otelenergy.NewMiddleware(mon)(p))
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatRequest(false, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct {
			Message, Type, Code string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusBadGateway || e.Error.Type != "upstream_error" || strings.Contains(e.Error.Message, u.Host) {
		t.Fatalf("status %d, error %+v; want 502 upstream_error without the backend's address %s", resp.StatusCode, e.Error, u.Host)
	}
	if l := logged.String(); !strings.Contains(l, "refused") || !strings.Contains(l, u.Host) {
		t.Fatalf("error log %q: want the refused dial to %s", l, u.Host)
	}
	if resp.Trailer.Get(openaiproxy.TrailerApproximate) == "" {
		t.Fatalf("no %s trailer on the error response: %v", openaiproxy.TrailerApproximate, resp.Trailer)
	}
}
