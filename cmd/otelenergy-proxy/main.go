// Command otelenergy-proxy is a reverse proxy for OpenAI-compatible servers
// (vLLM, SGLang, TGI, llama.cpp server, Ollama) that puts each completion's
// GPU energy, metered through NVML on the server's host, on its span, on the
// otelenergy.request.energy histogram and in HTTP trailers.
//
//	otelenergy-proxy -backend http://127.0.0.1:8000                  # in front of a running server
//	otelenergy-proxy -listen :8000 -- vllm serve MODEL --port 8001   # wrapper: the server as a child
//
// Every flag has an OTELENERGY_* variable; the standard OTEL_* variables
// configure the exporters. See docs/proxy.md and otelenergy-proxy -h.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/internal/proxy"
)

func main() {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(proxy.Main(os.Args[1:], proxy.Env{
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		LookupEnv: os.LookupEnv,
		Signals:   sig,
	}))
}
