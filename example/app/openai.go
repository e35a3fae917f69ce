package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/otelenergy/otelenergy/otelenergy"
)

// chatRequest is the part of an OpenAI chat completion request the demo
// reads.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           int `json:"max_tokens"`
	MaxCompletionTokens int `json:"max_completion_tokens"`
}

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// promptTokens is the demo's stand-in tokenizer: one token per three bytes
// of message text, plus four per message for the chat template. A
// message's content is a string or a list of parts, whose text parts
// count.
func promptTokens(req *chatRequest) int {
	n := 0
	for _, m := range req.Messages {
		n += (contentLen(m.Content)+2)/3 + 4
	}
	return n
}

func contentLen(raw json.RawMessage) int {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return len(s)
	}
	var parts []struct {
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts)
	n := 0
	for _, p := range parts {
		n += len(p.Text)
	}
	return n
}

// chatCompletions serves an OpenAI-compatible POST /v1/chat/completions:
// a prefill wait proportional to the prompt, then one token per tick, as
// chat.completion.chunk events (and, with stream_options.include_usage, a
// usage chunk) or as one chat.completion. Output is "tok0 tok1 ...", so it
// is the same for the same request.
func chatCompletions(w http.ResponseWriter, r *http.Request, mon *otelenergy.Monitor, tokenRate float64) {
	var req chatRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		badRequest(w, "the body must be a JSON chat completion request, such as {\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}")
		return
	}
	maxTokens := req.MaxCompletionTokens
	if maxTokens == 0 {
		maxTokens = req.MaxTokens
	}
	if maxTokens == 0 {
		maxTokens = 16
	}
	if maxTokens < 0 || maxTokens > 4096 {
		badRequest(w, "max_tokens must be in [1, 4096]")
		return
	}
	model := req.Model
	if model == "" {
		model = models[0]
	}
	prompt := promptTokens(&req)
	ctx := r.Context()
	id := "chatcmpl-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	created := time.Now().Unix()

	prefill := time.NewTimer(time.Duration(prompt) * prefillPerToken)
	defer prefill.Stop()
	select {
	case <-ctx.Done():
		return
	case <-prefill.C:
	}
	mon.AddInputTokens(ctx, prompt)

	rc := http.NewResponseController(w)
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / tokenRate))
	defer tick.Stop()
	var text []byte
	for i := range maxTokens {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		tok := fmt.Sprintf("tok%d ", i)
		if req.Stream {
			writeEvent(w, map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
				"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": tok}, "finish_reason": nil}}})
			rc.Flush()
		} else {
			text = append(text, tok...)
		}
		mon.AddTokens(ctx, 1)
	}
	usage := chatUsage{PromptTokens: prompt, CompletionTokens: maxTokens, TotalTokens: prompt + maxTokens}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": string(text)}, "finish_reason": "length"}},
			"usage":   usage})
		return
	}
	writeEvent(w, map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "length"}}})
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		writeEvent(w, map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{}, "usage": usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func writeEvent(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "data: %s\n\n", b)
}
