package openaiproxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// TestStripFixesContentLength sends a stream whose backend states its
// Content-Length: removing the usage chunk shortens the body, so the
// length the client is told must not be the backend's.
func TestStripFixesContentLength(t *testing.T) {
	s := &script{tokens: 4, prompt: 9}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		body := strings.Join(s.events(true), "")
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
	}))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	mon := newMonitor(t)
	p := otelenergy.NewMiddleware(mon)(openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider())))
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatRequest(true, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the stripped stream: %v (Content-Length %q)", err, resp.Header.Get("Content-Length"))
	}
	if want := strings.Join(s.events(false), ""); string(got) != want {
		t.Fatalf("client received\n%q\nwant\n%q", got, want)
	}
	if cl := resp.ContentLength; cl != -1 && cl != int64(len(got)) {
		t.Fatalf("Content-Length %d for a body of %d bytes", cl, len(got))
	}
}

// TestDeclaredLengthNotPreallocated opens 100 connections that each
// declare an 8 MiB request body and send 20 bytes of it, then holds them
// open while the proxy waits for the rest. The proxy must hold what
// arrived, not what was declared: the heap may grow by far less than one
// declared body in all.
func TestDeclaredLengthNotPreallocated(t *testing.T) {
	const conns, declared = 100, 8 << 20
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	mon := newMonitor(t)
	p := openaiproxy.New(u, mon, openaiproxy.WithMeterProvider(sdkmetric.NewMeterProvider()))
	var entered atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	open := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":\"m\",\"a\":1,", declared)
	}
	deadline := time.Now().Add(10 * time.Second)
	for entered.Load() < conns {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests reached the proxy", entered.Load(), conns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // every handler is now blocked reading its body
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	growth := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %.1f MiB with %d connections declaring %d MiB each and sending 20 bytes", float64(growth)/(1<<20), conns, declared>>20)
	if growth > declared {
		t.Fatalf("heap grew by %d bytes: the proxy allocates declared lengths before the bytes arrive", growth)
	}
	// The connections must still be waiting, not answered.
	open[0].SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := bufio.NewReader(open[0]).ReadByte(); err == nil {
		t.Fatal("the proxy answered a request whose body had not arrived")
	}
}
