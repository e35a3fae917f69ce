package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Environment of the test binary run as a wrapped backend.
const (
	childAddrEnv  = "OTELENERGY_TEST_BACKEND_ADDR"  // serve here
	childDelayEnv = "OTELENERGY_TEST_BACKEND_DELAY" // wait this long before listening
	childExitEnv  = "OTELENERGY_TEST_BACKEND_EXIT"  // exit with this status after the delay, without serving
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(childAddrEnv); addr != "" {
		os.Exit(childBackend(addr))
	}
	goleak.VerifyTestMain(m)
}

// childBackend is the wrapped backend: it serves the test backend, and
// /env, which answers with its CUDA_VISIBLE_DEVICES, until SIGTERM, and
// then exits with status 3 so that the test sees the status passed on.
func childBackend(addr string) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if d, err := time.ParseDuration(os.Getenv(childDelayEnv)); err == nil {
		time.Sleep(d)
	}
	if s := os.Getenv(childExitEnv); s != "" {
		n, _ := strconv.Atoi(s)
		return n
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle("/", &backend{tokens: 5, pace: 5 * time.Millisecond})
	mux.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, os.Getenv("CUDA_VISIBLE_DEVICES"))
	})
	go http.Serve(ln, mux)
	s := <-sig
	if s == syscall.SIGINT {
		return 4
	}
	return 3
}
