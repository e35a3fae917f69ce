package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGatewayPrintsRequestEnergy runs the gateway in front of a small SSE
// backend and checks the line it prints for a streamed completion.
func TestGatewayPrintsRequestEnergy(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 20 {
			fmt.Fprintf(w, "data: {\"model\":\"m1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(15 * time.Millisecond)
		}
		io.WriteString(w, "data: {\"model\":\"m1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":20}}\n\ndata: [DONE]\n\n")
	}))
	defer backend.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, ln, options{backend: backend.URL, devices: "0,1", out: &out}) }()

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "usage") {
		t.Fatalf("the usage chunk reached the client: %s", body)
	}
	time.Sleep(500 * time.Millisecond) // a batch of spans
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`request trace=\S+ model=m1 output_tokens=20 input_tokens=9 energy\.millijoules=(\d+)`)
	if !line.MatchString(out.String()) || !strings.Contains(out.String(), "devices=2") {
		t.Fatalf("output:\n%s", out.String())
	}
}

func TestParsePIDs(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "", want: nil},
		{in: " ", want: nil},
		{in: "4242", want: []int{4242}},
		{in: "4242, 4243", want: []int{4242, 4243}},
		{in: "0", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "vllm", wantErr: true},
		{in: "4242,", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parsePIDs(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("parsePIDs(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
