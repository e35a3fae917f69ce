package openaiproxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

// Operation names of the GenAI conventions, by path.
const (
	pathChat       = "/v1/chat/completions"
	pathCompletion = "/v1/completions"
)

// requestInfo is what the proxy learns from a completion request.
type requestInfo struct {
	model        string
	stream       bool
	hasStreamOpt bool
	inputEst     int // estimated prompt tokens; see estimateTokens
	parsed       bool
}

// completionRequest holds the request fields the proxy reads.
type completionRequest struct {
	Model         string          `json:"model"`
	Stream        bool            `json:"stream"`
	StreamOptions json.RawMessage `json:"stream_options"`
	Messages      []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Prompt json.RawMessage `json:"prompt"`
}

// estimateTokens is the prompt estimator: one token per four bytes of text,
// rounded up, the usual figure for English with OpenAI-style BPE
// vocabularies. It counts message text only, not the chat template's own
// tokens, so it tends to fall short of the server's count; the usage the
// server reports then adds the rest. A prompt given as token ids is exact.
func estimateTokens(textBytes int) int { return (textBytes + 3) / 4 }

// parseRequest reads the fields of a completion request body.
func parseRequest(body []byte) (requestInfo, bool) {
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return requestInfo{}, false
	}
	info := requestInfo{model: req.Model, stream: req.Stream, parsed: true,
		hasStreamOpt: len(req.StreamOptions) > 0 && string(req.StreamOptions) != "null"}
	text, ids := 0, 0
	for _, m := range req.Messages {
		text += textLen(m.Content)
	}
	if len(req.Prompt) > 0 {
		var s string
		var ss []string
		var toks []int64
		var batches [][]int64
		switch {
		case json.Unmarshal(req.Prompt, &s) == nil:
			text += len(s)
		case json.Unmarshal(req.Prompt, &ss) == nil:
			for _, p := range ss {
				text += len(p)
			}
		case json.Unmarshal(req.Prompt, &toks) == nil:
			ids += len(toks)
		case json.Unmarshal(req.Prompt, &batches) == nil:
			for _, b := range batches {
				ids += len(b)
			}
		}
	}
	info.inputEst = estimateTokens(text) + ids
	return info, true
}

// textLen returns the bytes of text in a message's content: a string, or
// an array of parts whose text parts count.
func textLen(raw json.RawMessage) int {
	if len(raw) == 0 {
		return 0
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return len(s)
		}
		return 0
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return 0
	}
	n := 0
	for _, p := range parts {
		n += len(p.Text)
	}
	return n
}

// includeUsageMember is spliced into a request that streams without
// stream_options.
var includeUsageMember = []byte(`"stream_options":{"include_usage":true}`)

// addIncludeUsage returns body with stream_options.include_usage set,
// keeping every other byte: the member is inserted right after the opening
// brace. It is called only on a body that parsed as an object with no
// stream_options member.
func addIncludeUsage(body []byte) []byte {
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return body
	}
	out := make([]byte, 0, len(body)+len(includeUsageMember)+1)
	out = append(out, body[:i+1]...)
	out = append(out, includeUsageMember...)
	if j := skipWS(body, i+1); j < len(body) && body[j] != '}' {
		out = append(out, ',')
	}
	return append(out, body[i+1:]...)
}

// initialBodyBuffer bounds the buffer a request body is first read into,
// whatever its declared Content-Length: most completion requests fit.
const initialBodyBuffer = 32 << 10

// readBody reads up to limit bytes of r's body. When the body is longer it
// returns ok false and leaves r.Body able to replay every byte.
func readBody(r *http.Request, limit int) (body []byte, ok bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true, nil
	}
	if h, ok := r.Body.(heldBody); ok {
		// A body already read whole, by a body-limiting stage in front:
		// parsed in place rather than copied again.
		b := h.Bytes()
		return b, len(b) <= limit, nil
	}
	// A declared length is a claim, not bytes: the buffer starts at most
	// initialBodyBuffer and grows as bytes arrive, so that connections
	// declaring large bodies and sending little hold little.
	buf := make([]byte, 0, min(max(r.ContentLength, 512), initialBodyBuffer, int64(limit)+1))
	b := bytes.NewBuffer(buf)
	_, err = io.CopyN(b, r.Body, int64(limit)+1)
	if err == io.EOF {
		err = nil
	}
	if err != nil || b.Len() > limit {
		r.Body = replayBody{io.MultiReader(bytes.NewReader(b.Bytes()), r.Body), r.Body}
		return nil, false, err
	}
	r.Body.Close()
	return b.Bytes(), true, nil
}

// heldBody is a request body already held in memory whole; Bytes returns
// the bytes not yet read. See [WithMaxBodyBytes].
type heldBody interface {
	io.ReadCloser
	Bytes() []byte
}

// replayBody replays the bytes already read before the rest of a body.
type replayBody struct {
	io.Reader
	io.Closer
}

// setBody replaces r's body with b.
func setBody(r *http.Request, b []byte) {
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}
