package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/simgpu"
)

// prefillPerToken is the prefill time per prompt token without a simulated
// GPU, whose jobs time their own prefill.
const prefillPerToken = 200 * time.Microsecond

// newServer returns the completion API: otelhttp outermost, so the energy
// middleware runs inside the server span. With a simulated gpu, each
// completion runs a job on it, so that the GPU's energy follows the work;
// with real hardware (gpu nil) the work is only timed.
func newServer(mon *otelenergy.Monitor, gpu *simgpu.GPU, tokenRate float64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		complete(w, r, mon, gpu, tokenRate)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		chatCompletions(w, r, mon, tokenRate)
	})
	return otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(mux), "completions")
}

// complete streams max_tokens tokens as server-sent events after the
// prompt's prefill, reporting tokens as they are produced.
func complete(w http.ResponseWriter, r *http.Request, mon *otelenergy.Monitor, gpu *simgpu.GPU, tokenRate float64) {
	prompt, err1 := strconv.Atoi(r.URL.Query().Get("prompt_tokens"))
	maxTokens, err2 := strconv.Atoi(r.URL.Query().Get("max_tokens"))
	if err1 != nil || err2 != nil || prompt < 0 || maxTokens <= 0 || maxTokens > 4096 || prompt > 1<<20 {
		http.Error(w, "prompt_tokens and max_tokens must be integers, max_tokens in [1, 4096]", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")

	prefillEnd := time.Now().Add(time.Duration(prompt) * prefillPerToken)
	var job *simgpu.Job
	if gpu != nil {
		job = gpu.Begin(prompt)
		defer job.End()
		prefillEnd = job.PrefillEnd()
	}
	prefill := time.NewTimer(time.Until(prefillEnd))
	defer prefill.Stop()
	select {
	case <-ctx.Done():
		return
	case <-prefill.C:
	}
	mon.AddInputTokens(ctx, prompt)

	tick := time.NewTicker(time.Duration(float64(time.Second) / tokenRate))
	defer tick.Stop()
	for i := range maxTokens {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if job != nil {
			job.Tokens(1)
		}
		fmt.Fprintf(w, "data: {\"index\":%d,\"token\":\"tok%d\"}\n\n", i, i)
		if flusher != nil {
			flusher.Flush()
		}
		mon.AddTokens(ctx, 1)
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

func drain(resp *http.Response) {
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
