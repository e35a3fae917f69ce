package openaiproxy

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"
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
	inputEst     int   // estimated prompt tokens; see estimateTokens
	maxTokens    int64 // max_tokens (or max_completion_tokens) times n; 0 when not stated
	parsed       bool
	// The members the upstream-streaming rewrite replaces; key < 0 when
	// the body has none.
	streamAt, optAt memberSpan
}

// memberSpan locates one member of a JSON object: key is the index of its
// key's opening quote, val of its value, end just after the value.
type memberSpan struct{ key, val, end int }

var noMember = memberSpan{-1, -1, -1}

// estimateTokens is the prompt estimator: one token per four bytes of text,
// rounded up, the usual figure for English with OpenAI-style BPE
// vocabularies. It counts message text only, not the chat template's own
// tokens, so it tends to fall short of the server's count; the usage the
// server reports then adds the rest. A prompt given as token ids is exact.
func estimateTokens(textBytes int) int { return (textBytes + 3) / 4 }

// parseRequest reads the fields of a completion request body with the
// package's scanner: no allocation but the model's name. Text lengths are
// of the unescaped strings.
func parseRequest(body []byte) (requestInfo, bool) {
	info := requestInfo{streamAt: noMember, optAt: noMember}
	text, ids := 0, 0
	var maxTokens, n int64 = 0, 1
	i := skipWS(body, 0)
	end, err := scanObject(body, i, 0, func(key []byte, i int) (int, error) {
		switch string(key) {
		case "model":
			if i < len(body) && body[i] == '"' {
				end, esc, err := scanString(body, i)
				if err != nil {
					return 0, err
				}
				info.model = decodeString(body[i:end], esc)
				return end, nil
			}
		case "stream":
			end, err := skipValue(body, i, 1)
			info.stream = err == nil && string(body[i:end]) == "true"
			info.streamAt = memberSpan{keyStart(body, key), i, end}
			return end, err
		case "stream_options":
			end, err := skipValue(body, i, 1)
			info.hasStreamOpt = err == nil && string(body[i:end]) != "null"
			info.optAt = memberSpan{keyStart(body, key), i, end}
			return end, err
		case "max_tokens", "max_completion_tokens":
			return scanInt(body, i, &maxTokens)
		case "n":
			return scanInt(body, i, &n)
		case "messages":
			if i < len(body) && body[i] == '[' {
				return scanArray(body, i, 1, func(i int) (int, error) {
					if i >= len(body) || body[i] != '{' {
						return skipValue(body, i, 2)
					}
					return scanObject(body, i, 2, func(key []byte, i int) (int, error) {
						if string(key) != "content" {
							return skipValue(body, i, 3)
						}
						end, n, err := contentLen(body, i)
						text += n
						return end, err
					})
				})
			}
		case "prompt":
			end, t, d, err := promptLen(body, i)
			text, ids = text+t, ids+d
			return end, err
		}
		return skipValue(body, i, 1)
	})
	if err != nil || skipWS(body, end) != len(body) {
		return requestInfo{}, false
	}
	info.parsed = true
	info.inputEst = estimateTokens(text) + ids
	if maxTokens > 0 {
		info.maxTokens = maxTokens * max(n, 1)
	}
	return info, true
}

// keyStart returns the index in b of the opening quote of key, a slice of
// b that the scanner handed out.
func keyStart(b, key []byte) int { return cap(b) - cap(key) - 1 }

// decodeString returns the JSON string s (quotes included) as Go text.
func decodeString(s []byte, escaped bool) string {
	if !escaped {
		return string(s[1 : len(s)-1])
	}
	v, err := strconv.Unquote(string(s))
	if err != nil {
		return ""
	}
	return v
}

// contentLen returns the text bytes of a message's content at b[i]: a
// string, or an array of parts whose "text" members count.
func contentLen(b []byte, i int) (end, n int, err error) {
	switch {
	case i < len(b) && b[i] == '"':
		end, _, err = scanString(b, i)
		if err != nil {
			return 0, 0, err
		}
		return end, unescapedLen(b[i+1 : end-1]), nil
	case i < len(b) && b[i] == '[':
		end, err = scanArray(b, i, 3, func(i int) (int, error) {
			if i >= len(b) || b[i] != '{' {
				return skipValue(b, i, 4)
			}
			return scanObject(b, i, 4, func(key []byte, i int) (int, error) {
				if string(key) == "text" && i < len(b) && b[i] == '"' {
					end, _, err := scanString(b, i)
					if err == nil {
						n += unescapedLen(b[i+1 : end-1])
					}
					return end, err
				}
				return skipValue(b, i, 5)
			})
		})
		return end, n, err
	}
	end, err = skipValue(b, i, 3)
	return end, 0, err
}

// promptLen returns the text bytes and token ids of a text completion's
// prompt at b[i]: a string, an array of strings, of token ids, or of
// arrays of token ids.
func promptLen(b []byte, i int) (end, text, ids int, err error) {
	switch {
	case i < len(b) && b[i] == '"':
		end, _, err = scanString(b, i)
		if err != nil {
			return 0, 0, 0, err
		}
		return end, unescapedLen(b[i+1 : end-1]), 0, nil
	case i < len(b) && b[i] == '[':
		end, err = scanArray(b, i, 2, func(i int) (int, error) {
			switch {
			case i < len(b) && b[i] == '"':
				end, _, err := scanString(b, i)
				if err == nil {
					text += unescapedLen(b[i+1 : end-1])
				}
				return end, err
			case i < len(b) && b[i] == '[':
				return scanArray(b, i, 3, func(i int) (int, error) {
					ids++
					return skipValue(b, i, 4)
				})
			}
			ids++
			return skipValue(b, i, 3)
		})
		return end, text, ids, err
	}
	end, err = skipValue(b, i, 2)
	return end, 0, 0, err
}

// unescapedLen returns the UTF-8 length of the JSON string contents s
// once its escapes are decoded, as encoding/json decodes them (a lone
// surrogate becomes U+FFFD).
func unescapedLen(s []byte) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			n++
			continue
		}
		i++
		if s[i] != 'u' || i+4 >= len(s) {
			n++
			continue
		}
		r, ok := hex4(s[i+1 : i+5])
		i += 4
		switch {
		case !ok:
			n++
		case r >= 0xd800 && r < 0xdc00 && i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u':
			if r2, ok := hex4(s[i+3 : i+7]); ok && r2 >= 0xdc00 && r2 < 0xe000 {
				n += 4
				i += 6
				continue
			}
			n += 3
		case r >= 0xd800 && r < 0xe000:
			n += 3
		default:
			n += utf8.RuneLen(r)
		}
	}
	return n
}

func hex4(s []byte) (rune, bool) {
	var r rune
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
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

// rewriteGrowth bounds what the rewrites add to a request body:
// streamingBody's two members and their commas.
const rewriteGrowth = len(`"stream":true`) + len(`"stream_options":{"include_usage":true}`) + 2

// streamingBody returns the request body sent upstream for a
// non-streaming client under upstream streaming: "stream":true and
// "stream_options":{"include_usage":true}, each replacing the member of
// that name where the body has one and inserted after the opening brace
// where it has none. Every other byte is kept.
func streamingBody(body []byte, info *requestInfo) []byte {
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return body
	}
	const streamMember, streamTrue, optValue = `"stream":true`, `true`, `{"include_usage":true}`
	out := make([]byte, 0, len(body)+len(streamMember)+len(includeUsageMember)+2)
	out = append(out, body[:i+1]...)
	var inserted []string
	if info.streamAt.key < 0 {
		inserted = append(inserted, streamMember)
	}
	if info.optAt.key < 0 {
		inserted = append(inserted, string(includeUsageMember))
	}
	for k, m := range inserted {
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	if len(inserted) > 0 {
		if j := skipWS(body, i+1); j < len(body) && body[j] != '}' {
			out = append(out, ',')
		}
	}
	// The replacements, in the order they appear.
	reps := [2]struct {
		m memberSpan
		v string
	}{{info.streamAt, streamTrue}, {info.optAt, optValue}}
	if reps[1].m.val < reps[0].m.val {
		reps[0], reps[1] = reps[1], reps[0]
	}
	at := i + 1
	for _, r := range reps {
		if r.m.key < 0 {
			continue
		}
		out = append(out, body[at:r.m.val]...)
		out = append(out, r.v...)
		at = r.m.end
	}
	return append(out, body[at:]...)
}

// initialBodyBuffer bounds the buffer a request body is first read into,
// whatever its declared Content-Length: most completion requests fit.
const initialBodyBuffer = 32 << 10

// readBody reads up to limit bytes of r's body. When the body is longer it
// returns ok false and leaves r.Body able to replay every byte. held
// reports a body that a stage in front already read whole ([heldBody]):
// its bytes are returned in place and r.Body is left as it was, unread.
func readBody(r *http.Request, limit int) (body []byte, held, ok bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, false, true, nil
	}
	if h, ok := r.Body.(heldBody); ok {
		// A body already read whole, by a body-limiting stage in front:
		// parsed in place rather than copied again.
		b := h.Bytes()
		return b, true, len(b) <= limit, nil
	}
	// A declared length is a claim, not bytes: the buffer starts at most
	// initialBodyBuffer and grows as bytes arrive, so that connections
	// declaring large bodies and sending little hold little.
	size := int64(512)
	if r.ContentLength >= 0 {
		// One byte past the declared length tells a longer body.
		size = r.ContentLength + 1
	}
	b := make([]byte, 0, min(size, initialBodyBuffer, int64(limit)+1))
	for {
		if len(b) == cap(b) {
			if len(b) > limit {
				break
			}
			b = append(b, 0)[:len(b)]
		}
		var n int
		n, err = r.Body.Read(b[len(b):min(cap(b), limit+1)])
		b = b[:len(b)+n]
		if err != nil || len(b) > limit {
			break
		}
	}
	if err == io.EOF {
		err = nil
	}
	if err != nil || len(b) > limit {
		r.Body = replayBody{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		return nil, false, false, err
	}
	r.Body.Close()
	return b, false, true, nil
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

// bytesBody is a request body of bytes in memory.
type bytesBody struct{ bytes.Reader }

func (*bytesBody) Close() error { return nil }

// setBody replaces r's body with b. Content-Length is set in r's header
// only when it changes, so that a header the caller shares is written
// only after the caller cloned it.
func setBody(r *http.Request, b []byte) {
	body := &bytesBody{}
	body.Reset(b)
	r.Body = body
	if r.ContentLength != int64(len(b)) {
		r.ContentLength = int64(len(b))
		r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	}
	if r.GetBody != nil {
		r.GetBody = func() (io.ReadCloser, error) {
			body := &bytesBody{}
			body.Reset(b)
			return body, nil
		}
	}
}
