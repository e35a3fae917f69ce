package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/otelenergy/otelenergy/otelenergy"
)

// prefillPerToken is the simulated cost of processing one prompt token.
const prefillPerToken = 200 * time.Microsecond

// newServer returns the completion API: otelhttp outermost, so the energy
// middleware runs inside the server span.
func newServer(mon *otelenergy.Monitor, tokenRate float64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		complete(w, r, mon, tokenRate)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		chatCompletions(w, r, mon, tokenRate)
	})
	return otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(mux), "completions")
}

// complete streams max_tokens tokens as server-sent events after a prefill
// proportional to prompt_tokens, reporting tokens as they are produced.
func complete(w http.ResponseWriter, r *http.Request, mon *otelenergy.Monitor, tokenRate float64) {
	prompt, err1 := strconv.Atoi(r.URL.Query().Get("prompt_tokens"))
	maxTokens, err2 := strconv.Atoi(r.URL.Query().Get("max_tokens"))
	if err1 != nil || err2 != nil || prompt < 0 || maxTokens <= 0 || maxTokens > 4096 || prompt > 1<<20 {
		http.Error(w, "prompt_tokens and max_tokens must be integers, max_tokens in [1, 4096]", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")

	prefill := time.NewTimer(time.Duration(prompt) * prefillPerToken)
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
