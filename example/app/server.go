package main

import (
	"encoding/json"
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
// with real hardware (gpu nil) the work is only timed. A nil mon serves
// without metering: no energy middleware, no tokens counted.
func newServer(mon *otelenergy.Monitor, gpu *simgpu.GPU, tokenRate float64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		complete(w, r, mon, gpu, tokenRate)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		chatCompletions(w, r, mon, tokenRate)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		listModels(w, mon)
	})
	return otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(mux), "completions")
}

// listModels answers GET /v1/models with the demo's models, the current
// run's first, as OpenAI's API lists them.
func listModels(w http.ResponseWriter, mon *otelenergy.Monitor) {
	current := models[0]
	if run := mon.Run(); run != nil && run.Model() != "" {
		current = run.Model()
	}
	data := []any{map[string]any{"id": current, "object": "model", "created": 0, "owned_by": "otelenergy-demo"}}
	for _, m := range models {
		if m != current {
			data = append(data, map[string]any{"id": m, "object": "model", "created": 0, "owned_by": "otelenergy-demo"})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// completionRequest is the part of an OpenAI completion request the demo
// reads. The prompt is a string, a list of strings, or token ids.
type completionRequest struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	Stream    bool            `json:"stream"`
}

// promptLen returns a prompt's tokens by the demo's stand-in tokenizer
// (one per three bytes of text), or its length when given as token ids.
func promptLen(raw json.RawMessage) (int, bool) {
	if len(raw) == 0 {
		return 0, true
	}
	var s string
	var ss []string
	var ids []int
	var batches [][]int
	switch {
	case json.Unmarshal(raw, &s) == nil:
		return (len(s) + 2) / 3, true
	case json.Unmarshal(raw, &ss) == nil:
		n := 0
		for _, p := range ss {
			n += (len(p) + 2) / 3
		}
		return n, true
	case json.Unmarshal(raw, &ids) == nil:
		return len(ids), true
	case json.Unmarshal(raw, &batches) == nil:
		n := 0
		for _, b := range batches {
			n += len(b)
		}
		return n, true
	}
	return 0, false
}

// complete serves POST /v1/completions: an OpenAI completion request
// ({"model":"m","prompt":"hi","max_tokens":16,"stream":true}), answered
// with text_completion chunks or one text_completion. The demo's load
// generator sets the token counts exactly instead, with the query
// parameters prompt_tokens and max_tokens and no body; it streams.
// Tokens are produced after the prompt's prefill, one per tick, and
// reported as they are.
func complete(w http.ResponseWriter, r *http.Request, mon *otelenergy.Monitor, gpu *simgpu.GPU, tokenRate float64) {
	q := r.URL.Query()
	req := completionRequest{Model: models[0], Stream: true}
	var prompt, maxTokens int
	if q.Has("prompt_tokens") || q.Has("max_tokens") {
		var err1, err2 error
		prompt, err1 = strconv.Atoi(q.Get("prompt_tokens"))
		maxTokens, err2 = strconv.Atoi(q.Get("max_tokens"))
		if err1 != nil || err2 != nil {
			badRequest(w, "prompt_tokens and max_tokens must be integers")
			return
		}
	} else {
		req.Stream = false
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			badRequest(w, "the body must be a JSON completion request, such as {\"model\":\"m\",\"prompt\":\"hi\"}")
			return
		}
		var ok bool
		if prompt, ok = promptLen(req.Prompt); !ok {
			badRequest(w, "prompt must be a string, a list of strings, or token ids")
			return
		}
		maxTokens = 16
		if req.MaxTokens != nil {
			maxTokens = *req.MaxTokens
		}
		if req.Model == "" {
			req.Model = models[0]
		}
	}
	if prompt < 0 || prompt > 1<<20 || maxTokens <= 0 || maxTokens > 4096 {
		badRequest(w, "max_tokens must be in [1, 4096] and the prompt at most 2^20 tokens")
		return
	}
	ctx := r.Context()
	id := "cmpl-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	created := time.Now().Unix()
	rc := http.NewResponseController(w)
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
	}

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
	var text []byte
	for i := range maxTokens {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if job != nil {
			job.Tokens(1)
		}
		tok := fmt.Sprintf("tok%d ", i)
		if req.Stream {
			writeEvent(w, map[string]any{"id": id, "object": "text_completion", "created": created, "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "text": tok, "finish_reason": nil}}})
			rc.Flush()
		} else {
			text = append(text, tok...)
		}
		mon.AddTokens(ctx, 1)
	}
	usage := chatUsage{PromptTokens: prompt, CompletionTokens: maxTokens, TotalTokens: prompt + maxTokens}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "text_completion", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "text": string(text), "finish_reason": "length"}}, "usage": usage})
		return
	}
	writeEvent(w, map[string]any{"id": id, "object": "text_completion", "created": created, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "text": "", "finish_reason": "length"}}, "usage": usage})
	io.WriteString(w, "data: [DONE]\n\n")
}

// badRequest answers 400 with an OpenAI-style error body.
func badRequest(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
}

func drain(resp *http.Response) {
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
