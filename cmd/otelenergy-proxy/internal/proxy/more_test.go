package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// TestBackendTimeout504 checks that a backend that sends no headers within
// -backend-timeout gets the caller a 504 with an OpenAI-style body.
func TestBackendTimeout504(t *testing.T) {
	be := &backend{block: true, canceled: make(chan struct{}, 1)}
	b := httptest.NewServer(be)
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-backend-timeout", "300ms"}, nil)
	resp, body := post(t, context.Background(), http.DefaultClient, r.api, false)
	var e struct{ Error struct{ Type string } }
	if resp.StatusCode != http.StatusGatewayTimeout || json.Unmarshal(body, &e) != nil || e.Error.Type != "upstream_timeout" {
		t.Fatalf("status %d, body %s; want 504 upstream_timeout", resp.StatusCode, body)
	}
	<-be.canceled // the backend's request ended with it
}

// TestReadinessFollowsBackend checks that /readyz turns 503 when the
// backend stops answering.
func TestReadinessFollowsBackend(t *testing.T) {
	b := httptest.NewServer(&backend{})
	r := start(t, []string{"-simulate", "-backend", b.URL}, nil)
	waitReady(t, r.admin)
	b.Close()
	deadline := time.Now().Add(3 * pollServing)
	for {
		resp, err := http.Get(r.admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(msg), "backend") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q with the backend down", resp.StatusCode, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLogRequestsJSON checks -log-requests with -log-format json: every
// line is a JSON object, and a completion gets one line with its tokens
// and energy.
func TestLogRequestsJSON(t *testing.T) {
	b := httptest.NewServer(&backend{tokens: 10, pace: 15 * time.Millisecond})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-horizon", "1s", "-log-requests"}, map[string]string{"OTELENERGY_LOG_FORMAT": "json"})
	time.Sleep(500 * time.Millisecond) // a few counter steps
	post(t, context.Background(), http.DefaultClient, r.api, true)
	r.stop(t)
	var got map[string]any
	sc := bufio.NewScanner(strings.NewReader(r.stderr.String()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("a log line is not JSON: %q", sc.Text())
		}
		if line["msg"] == "request" {
			if got != nil {
				t.Fatal("two request lines for one request")
			}
			got = line
		}
	}
	if got == nil || got["path"] != "/v1/chat/completions" || got["output_tokens"] != float64(10) || got["energy_mj"] == nil || got["status"] != float64(200) {
		t.Fatalf("request line %v; want the path, status 200, 10 output tokens and the energy", got)
	}
}

// TestReadHeaderTimeout checks that a client that never finishes its
// headers is cut off.
func TestReadHeaderTimeout(t *testing.T) {
	old := readHeaderTimeout
	readHeaderTimeout = 300 * time.Millisecond
	t.Cleanup(func() { readHeaderTimeout = old })
	b := httptest.NewServer(&backend{})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL}, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(r.api, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	began := time.Now()
	io.Copy(io.Discard, c) // returns when the server closes the connection
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("the connection stayed open %v with its headers unfinished", d)
	}
}

// TestDrainTimeoutCuts checks that a stream still running when
// -drain-timeout passes is cut, and that the proxy then exits 0.
func TestDrainTimeoutCuts(t *testing.T) {
	b := httptest.NewServer(&backend{tokens: 1000, pace: 10 * time.Millisecond})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-horizon", "1s", "-drain-timeout", "300ms"}, nil)
	resp, err := http.Post(r.api+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	r.sig <- syscall.SIGTERM
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatal("a 10 s stream completed within a 300 ms drain")
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("the stream was cut after %v", d)
	}
	if code := <-r.code; code != 0 {
		t.Fatalf("exit %d", code)
	}
	r.code <- 0
	if !strings.Contains(r.stderr.String(), "drain timed out") {
		t.Fatalf("the log does not say the drain timed out:\n%s", r.stderr)
	}
}

// TestClientDisconnectLoggedAndSpanFailed cuts a stream from the client's
// side: -log-requests must still log the request, with its cause, and the
// server span must say the request failed, not a plain 200.
func TestClientDisconnectLoggedAndSpanFailed(t *testing.T) {
	col := newCollector(t)
	b := httptest.NewServer(&backend{tokens: 200, pace: 10 * time.Millisecond})
	t.Cleanup(b.Close)
	r := start(t, []string{"-simulate", "-backend", b.URL, "-horizon", "1s", "-log-requests"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.api+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(chatBody, true)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(resp.Body).ReadString('\n') // the first event has come
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.stderr.String(), "msg=request") {
		if time.Now().After(deadline) {
			t.Fatalf("no request line for the cut stream:\n%s", r.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := r.stderr.String(); !strings.Contains(l, `error="the client went away"`) {
		t.Fatalf("the request line does not give the cause:\n%s", l)
	}
	r.stop(t)
	spans := col.serverSpans()
	if len(spans) != 1 || spans[0].Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Fatalf("spans %v: want one, failed", spans)
	}
	if v, _ := attr(spans[0].Attributes, "error.type"); v.GetStringValue() != "client_disconnect" {
		t.Fatalf("error.type %v, want client_disconnect", v)
	}
}
