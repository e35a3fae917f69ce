package openaiproxy

import (
	"bytes"
	"errors"
)

// errSyntax reports a body the scanner cannot read as the JSON it expects.
var errSyntax = errors.New("openaiproxy: malformed JSON")

// maxDepth bounds the nesting the scanner follows, so that hostile input
// cannot exhaust the stack.
const maxDepth = 64

// chunkInfo is what one completion body (a streamed chunk or a whole
// response) tells the proxy. The scanner fills it without allocating; model
// aliases the scanned bytes.
type chunkInfo struct {
	model          []byte // raw contents of the top-level "model" string
	modelEscaped   bool   // model contains a backslash escape
	hasChoices     bool   // a top-level "choices" array is present
	choices        int    // its elements
	contentChoices int    // elements with generated content
	contentBytes   int    // bytes of generated text, for estimates
	// stated is the tokens the content choices state they carry
	// (logprobs entries, token ids); unstated counts the content
	// choices that state nothing.
	stated   int64
	unstated int
	finished bool // some element has a non-null finish_reason
	hasUsage bool // a non-null top-level "usage" object is present
	// usageNull is a top-level "usage":null; usageZero a usage object
	// whose numbers are all zero. usageAt locates the member either way.
	usageNull, usageZero bool
	usageAt              memberSpan
	promptTokens         int64
	completion           int64
	cachedTokens         int64 // usage.prompt_tokens_details.cached_tokens
	// predicted is llama.cpp's timings.predicted_n, the tokens generated
	// so far, and tokens the length of a top-level "tokens" array of
	// token ids (llama.cpp's return_tokens); -1 when absent.
	predicted int64
	tokens    int
	// hasError is an error event: a top-level "error" member that is not
	// null, or "object":"error".
	hasError bool
	// texts counts the non-empty strings that made a choice's content,
	// and textAt is the last one's span (its quotes included), for the
	// envelope's template.
	texts  int
	textAt span
	calls  bool // tool calls or a function call made a choice's content
}

// scanChunk reads one completion object from b into c. It recognises
// choices[].delta.{content,reasoning_content,reasoning,refusal,tool_calls,function_call}
// (chat chunks), choices[].text (text completions and their chunks),
// choices[].message (chat responses, the same members),
// choices[].{logprobs,token_ids} (the tokens a choice states),
// choices[].finish_reason, model, usage.{prompt,completion}_tokens,
// usage.prompt_tokens_details.cached_tokens, timings.predicted_n, tokens,
// error and object, and skips everything else. It validates only what it
// walks over.
func scanChunk(b []byte, c *chunkInfo) error { return scanChunkAfter(b, c, nil) }

// envelope is the part of a stream's chunks before their "choices", which
// a server repeats in every chunk (id, object, created, model,
// system_fingerprint): once a chunk's envelope has been read, a chunk
// that begins with the same bytes is read from its "choices" on, its
// envelope compared rather than scanned. It holds a copy of the bytes. An
// envelope that held anything the scanner reads besides the model (usage,
// timings, tokens, an error) is not kept.
type envelope struct {
	prefix       []byte
	model        span // of the model's contents within prefix
	modelEscaped bool
	ok           bool

	// The template: most chunks of a stream differ from the one before
	// only in the text of their one choice. A chunk read whole whose one
	// content string is all that made its choice's content (nothing
	// stated, no finish, usage or error) is kept as the bytes before its
	// string (pre, through the opening quote) and after it (suf, from the
	// closing quote) with what it read (info); a chunk with those bytes
	// around a string reads as info with that string's length.
	pre, suf  []byte
	info      chunkInfo
	infoModel []byte
	tmplOK    bool
}

// fromTemplate reads b as env's template with another string, and
// reports whether b is one.
func (env *envelope) fromTemplate(b []byte, c *chunkInfo) bool {
	if !env.tmplOK || len(b) < len(env.pre)+len(env.suf) || !bytes.HasPrefix(b, env.pre) || !bytes.HasSuffix(b, env.suf) {
		return false
	}
	q := len(env.pre) - 1
	end, _, err := scanString(b, q)
	if err != nil || end != len(b)-len(env.suf)+1 {
		return false
	}
	*c = env.info
	c.model = env.infoModel
	c.textAt = span{q, end}
	if c.contentBytes = end - q - 2; c.contentBytes == 0 {
		c.contentChoices, c.unstated, c.texts, c.textAt = 0, 0, 0, span{}
	}
	return true
}

// keepTemplate keeps b, just read whole into c, as env's template when it
// is one.
func (env *envelope) keepTemplate(b []byte, c *chunkInfo) {
	if c.choices != 1 || c.contentChoices != 1 || c.texts != 1 || c.calls || c.unstated != 1 || c.finished ||
		c.hasUsage || c.usageNull || c.predicted >= 0 || c.tokens >= 0 || c.hasError {
		return
	}
	env.pre = append(env.pre[:0], b[:c.textAt.from+1]...)
	env.suf = append(env.suf[:0], b[c.textAt.to-1:]...)
	env.info = *c
	env.infoModel = append(env.infoModel[:0], c.model...)
	env.info.model = nil
	env.tmplOK = true
}

// scanChunkAfter is scanChunk that reads a chunk whose envelope is env's
// from its "choices" on, and keeps the envelope of a chunk it reads whole
// in env; a nil env is none.
func scanChunkAfter(b []byte, c *chunkInfo, env *envelope) error {
	if env != nil && env.fromTemplate(b, c) {
		return nil
	}
	tmpl := env
	*c = chunkInfo{usageAt: noMember, predicted: -1, tokens: -1}
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errSyntax
	}
	i++
	first := true
	if env != nil && env.ok && len(b) > len(env.prefix) && bytes.HasPrefix(b, env.prefix) {
		i, first = len(env.prefix), true
		if env.model.to > 0 {
			c.model, c.modelEscaped = env.prefix[env.model.from:env.model.to], env.modelEscaped
		}
		env = nil // kept already
	}
	// keep is whether what was read so far lets the envelope be kept.
	keep := env != nil
	for ; ; first = false {
		key, v, done, err := nextMember(b, i, first)
		if err != nil {
			return err
		}
		if done {
			i = v
			break
		}
		switch string(key) {
		case "model":
			if b[v] == '"' {
				end, esc, err := scanString(b, v)
				if err != nil {
					return err
				}
				c.model, c.modelEscaped = b[v+1:end-1], esc
				i = end
				continue
			}
		case "choices":
			if keep {
				start := keyStart(b, key)
				env.prefix = append(env.prefix[:0], b[:start]...)
				env.model, env.modelEscaped, env.ok = span{}, c.modelEscaped, true
				if len(c.model) > 0 {
					from := cap(b) - cap(c.model)
					env.model = span{from, from + len(c.model)}
				}
				keep = false
			}
			if b[v] == '[' {
				c.hasChoices = true
				i, err = scanChoices(b, v, c)
				if err != nil {
					return err
				}
				continue
			}
		case "usage":
			keep = false
			if i, err = scanUsage(b, key, v, c); err != nil {
				return err
			}
			continue
		case "timings":
			keep = false
			if b[v] == '{' {
				if i, err = scanObject(b, v, 1, func(key []byte, i int) (int, error) {
					if string(key) == "predicted_n" {
						return scanInt(b, i, &c.predicted)
					}
					return skipValue(b, i, 2)
				}); err != nil {
					return err
				}
				continue
			}
		case "tokens":
			keep = false
			if b[v] == '[' {
				n, end, err := countArray(b, v, 1)
				if err != nil {
					return err
				}
				c.tokens, i = n, end
				continue
			}
		case "error":
			keep = false
			end, err := skipFast(b, v)
			if err != nil {
				return err
			}
			c.hasError = c.hasError || b[v] != 'n'
			i = end
			continue
		case "object":
			end, err := skipFast(b, v)
			if err != nil {
				return err
			}
			c.hasError = c.hasError || string(b[v:end]) == `"error"`
			keep = keep && !c.hasError
			i = end
			continue
		}
		if i, err = skipFast(b, v); err != nil {
			return err
		}
	}
	if skipWS(b, i) != len(b) {
		return errSyntax
	}
	if tmpl != nil {
		tmpl.keepTemplate(b, c)
	}
	return nil
}

// nextMember reads the next member of an object whose members are read
// from b[i] on (just past the opening brace when first, past the last
// value otherwise). It returns the member's raw key and the index of its
// value, or done and the index past the closing brace. It calls no
// function value, so that the chunk path, which reads every event with
// it, costs a loop and no indirect call per member.
func nextMember(b []byte, i int, first bool) (key []byte, val int, done bool, err error) {
	i = skipWS(b, i)
	if i >= len(b) {
		return nil, 0, false, errSyntax
	}
	switch {
	case b[i] == '}':
		return nil, i + 1, true, nil
	case !first && b[i] != ',':
		return nil, 0, false, errSyntax
	case !first:
		i = skipWS(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false, errSyntax
	}
	end, _, err := scanString(b, i)
	if err != nil {
		return nil, 0, false, err
	}
	key = b[i+1 : end-1]
	i = skipWS(b, end)
	if i >= len(b) || b[i] != ':' {
		return nil, 0, false, errSyntax
	}
	i = skipWS(b, i+1)
	if i >= len(b) {
		return nil, 0, false, errSyntax
	}
	return key, i, false, nil
}

// nextElement is nextMember for an array: it returns the index of the
// next element, or done and the index past the closing bracket.
func nextElement(b []byte, i int, first bool) (elem int, done bool, err error) {
	i = skipWS(b, i)
	if i >= len(b) {
		return 0, false, errSyntax
	}
	switch {
	case b[i] == ']':
		return i + 1, true, nil
	case !first && b[i] != ',':
		return 0, false, errSyntax
	case !first:
		i = skipWS(b, i+1)
	}
	if i >= len(b) {
		return 0, false, errSyntax
	}
	return i, false, nil
}

// skipFast returns the index after the JSON value at b[i]. Objects and
// arrays are skipped by counting brackets outside strings, without
// checking what is between them: the scanner validates only what it
// reads, and a value it skips it does not read.
func skipFast(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errSyntax
	}
	switch b[i] {
	case '"':
		end, _, err := scanString(b, i)
		return end, err
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _, err := scanString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errSyntax
	}
	return skipValue(b, i, 0)
}

// scanChoices reads the choices array at b[i].
func scanChoices(b []byte, i int, c *chunkInfo) (int, error) {
	i++
	for first := true; ; first = false {
		e, done, err := nextElement(b, i, first)
		if err != nil || done {
			return e, err
		}
		c.choices++
		if i, err = scanChoice(b, e, c); err != nil {
			return 0, err
		}
	}
}

// scanUsage reads the top-level usage member whose value is at b[i].
func scanUsage(b, key []byte, i int, c *chunkInfo) (int, error) {
	start := keyStart(b, key)
	if i < len(b) && b[i] == 'n' {
		end, err := literal(b, i, "null")
		c.usageNull, c.usageAt = err == nil, memberSpan{start, i, end}
		return end, err
	}
	if i >= len(b) || b[i] != '{' {
		return skipValue(b, i, 1)
	}
	c.hasUsage, c.usageZero = true, true
	end, err := scanObject(b, i, 1, func(key []byte, i int) (int, error) {
		switch string(key) {
		case "prompt_tokens":
			return c.usageInt(b, i, &c.promptTokens)
		case "completion_tokens":
			return c.usageInt(b, i, &c.completion)
		case "prompt_tokens_details":
			if i < len(b) && b[i] == '{' {
				return scanObject(b, i, 2, func(key []byte, i int) (int, error) {
					if string(key) == "cached_tokens" {
						return c.usageInt(b, i, &c.cachedTokens)
					}
					end, zero, err := zeroValue(b, i, 3)
					c.usageZero = c.usageZero && zero
					return end, err
				})
			}
		}
		end, zero, err := zeroValue(b, i, 2)
		c.usageZero = c.usageZero && zero
		return end, err
	})
	c.usageAt = memberSpan{start, i, end}
	return end, err
}

// usageInt reads a count of usage and notes whether it is zero.
func (c *chunkInfo) usageInt(b []byte, i int, v *int64) (int, error) {
	_, zero, err := zeroValue(b, i, 3)
	if err != nil {
		return 0, err
	}
	c.usageZero = c.usageZero && zero
	return scanInt(b, i, v)
}

// zeroValue skips the value at b[i] and reports whether every number in
// it is zero (a value with no number, null included, is).
func zeroValue(b []byte, i, depth int) (end int, zero bool, err error) {
	if i >= len(b) {
		return 0, false, errSyntax
	}
	switch c := b[i]; {
	case c == '-' || (c >= '0' && c <= '9'):
		end, err = skipNumber(b, i)
		if err != nil {
			return 0, false, err
		}
		// Zero when no digit before the exponent is.
		zero = true
		for _, d := range b[i:end] {
			if d == 'e' || d == 'E' {
				break
			}
			if d >= '1' && d <= '9' {
				zero = false
				break
			}
		}
		return end, zero, nil
	case c == '{':
		zero = true
		end, err = scanObject(b, i, depth+1, func(_ []byte, i int) (int, error) {
			end, z, err := zeroValue(b, i, depth+1)
			zero = zero && z
			return end, err
		})
		return end, zero, err
	case c == '[':
		zero = true
		end, err = scanArray(b, i, depth+1, func(i int) (int, error) {
			end, z, err := zeroValue(b, i, depth+1)
			zero = zero && z
			return end, err
		})
		return end, zero, err
	}
	end, err = skipValue(b, i, depth)
	return end, true, err
}

// scanChoice reads one element of choices.
func scanChoice(b []byte, i int, c *chunkInfo) (int, error) {
	if b[i] != '{' {
		return skipFast(b, i)
	}
	content := false
	var logprobs, ids int64
	i++
	for first := true; ; first = false {
		key, v, done, err := nextMember(b, i, first)
		if err != nil {
			return 0, err
		}
		if done {
			i = v
			break
		}
		switch string(key) {
		case "delta", "message":
			if b[v] == '{' {
				end, has, err := scanMessage(b, v, c)
				if err != nil {
					return 0, err
				}
				content = content || has
				i = end
				continue
			}
		case "text":
			end, has, err := c.text(b, v, 3)
			if err != nil {
				return 0, err
			}
			content = content || has
			i = end
			continue
		case "logprobs":
			if b[v] == '{' {
				end, n, err := countLogprobs(b, v)
				if err != nil {
					return 0, err
				}
				logprobs += n
				i = end
				continue
			}
		case "token_ids":
			if b[v] == '[' {
				n, end, err := countArray(b, v, 3)
				if err != nil {
					return 0, err
				}
				ids, i = int64(n), end
				continue
			}
		case "finish_reason":
			if b[v] != 'n' {
				c.finished = true
			}
		}
		if i, err = skipFast(b, v); err != nil {
			return 0, err
		}
	}
	if content {
		// Logprobs entries and token ids state the same tokens twice
		// when a server sends both.
		c.contentChoices++
		if stated := max(logprobs, ids); stated > 0 {
			c.stated += stated
		} else {
			c.unstated++
		}
	}
	return i, nil
}

// scanMessage reads a choice's delta or message at b[i] and reports
// whether it carries generated content.
func scanMessage(b []byte, i int, c *chunkInfo) (end int, content bool, err error) {
	i++
	for first := true; ; first = false {
		key, v, done, err := nextMember(b, i, first)
		if err != nil {
			return 0, false, err
		}
		if done {
			return v, content, nil
		}
		switch string(key) {
		case "content", "reasoning_content", "reasoning", "refusal":
			end, has, err := c.text(b, v, 4)
			if err != nil {
				return 0, false, err
			}
			content = content || has
			i = end
			continue
		case "tool_calls":
			if b[v] == '[' {
				n, end, err := countArray(b, v, 4)
				if err != nil {
					return 0, false, err
				}
				content = content || n > 0
				c.calls = c.calls || n > 0
				i = end
				continue
			}
		case "function_call":
			content = content || b[v] == '{'
			c.calls = c.calls || b[v] == '{'
		}
		if i, err = skipFast(b, v); err != nil {
			return 0, false, err
		}
	}
}

// text reads a member of generated text at b[v] and reports whether it
// is a non-empty string, noting its length and place.
func (c *chunkInfo) text(b []byte, v, depth int) (end int, has bool, err error) {
	end, n, err := stringLen(b, v, depth)
	if err != nil || n == 0 {
		return end, false, err
	}
	c.contentBytes += n
	c.texts, c.textAt = c.texts+1, span{v, end}
	return end, true, nil
}

// countLogprobs reads a choice's logprobs object at b[i] and returns the
// entries of its content, refusal and tokens arrays.
func countLogprobs(b []byte, i int) (end int, n int64, err error) {
	i++
	for first := true; ; first = false {
		key, v, done, err := nextMember(b, i, first)
		if err != nil {
			return 0, 0, err
		}
		if done {
			return v, n, nil
		}
		switch string(key) {
		case "content", "refusal", "tokens":
			if b[v] == '[' {
				k, end, err := countArray(b, v, 4)
				if err != nil {
					return 0, 0, err
				}
				n += int64(k)
				i = end
				continue
			}
		}
		if i, err = skipFast(b, v); err != nil {
			return 0, 0, err
		}
	}
}

// countArray skips the array at b[i] and returns its length.
func countArray(b []byte, i, depth int) (n, end int, err error) {
	i++
	for first := true; ; first = false {
		e, done, err := nextElement(b, i, first)
		if err != nil || done {
			return n, e, err
		}
		n++
		if i, err = skipFast(b, e); err != nil {
			return 0, 0, err
		}
	}
}

// stringLen skips the value at i and returns the length of its contents
// when it is a string, 0 otherwise.
func stringLen(b []byte, i, depth int) (end, n int, err error) {
	if i < len(b) && b[i] == '"' {
		end, _, err = scanString(b, i)
		if err != nil {
			return 0, 0, err
		}
		return end, end - i - 2, nil
	}
	end, err = skipValue(b, i, depth)
	return end, 0, err
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanObject walks the object at b[i], calling member with each key's raw
// contents and the index of its value; member returns the index after the
// value. It returns the index after the closing brace.
func scanObject(b []byte, i, depth int, member func(key []byte, i int) (int, error)) (int, error) {
	return scanSeq(b, i, depth, '{', '}', func(i int) (int, error) {
		if i >= len(b) || b[i] != '"' {
			return 0, errSyntax
		}
		end, _, err := scanString(b, i)
		if err != nil {
			return 0, err
		}
		key := b[i+1 : end-1]
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, errSyntax
		}
		return member(key, skipWS(b, i+1))
	})
}

// scanArray walks the array at b[i], calling elem with the index of each
// element; elem returns the index after it.
func scanArray(b []byte, i, depth int, elem func(i int) (int, error)) (int, error) {
	return scanSeq(b, i, depth, '[', ']', elem)
}

// scanSeq walks the comma-separated items between open at b[i] and its
// close, calling item with the index of each; item returns the index after
// it.
func scanSeq(b []byte, i, depth int, open, close byte, item func(i int) (int, error)) (int, error) {
	if depth > maxDepth || i >= len(b) || b[i] != open {
		return 0, errSyntax
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == close {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = item(i); err != nil {
			return 0, err
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, errSyntax
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case close:
			return i + 1, nil
		default:
			return 0, errSyntax
		}
	}
}

// scanString returns the index after the string starting at b[i] and
// whether it contains an escape. Keys and short values are looped over;
// past shortString bytes the closing quote is found with bytes.IndexByte,
// so that long content costs no loop of the scanner's own. Control
// characters inside a string are not rejected (encoding/json would),
// which changes no figure read.
func scanString(b []byte, i int) (int, bool, error) {
	j, end := i+1, min(i+1+shortString, len(b))
	for ; j < end; j++ {
		switch b[j] {
		case '"':
			return j + 1, false, nil
		case '\\':
			return scanEscaped(b, j)
		}
	}
	if j == len(b) {
		return 0, false, errSyntax
	}
	q := bytes.IndexByte(b[j:], '"')
	if q < 0 {
		return 0, false, errSyntax
	}
	if k := bytes.IndexByte(b[j:j+q], '\\'); k >= 0 {
		return scanEscaped(b, j+k)
	}
	return j + q + 1, false, nil
}

// shortString is how much of a string scanString loops over before it
// calls bytes.IndexByte, whose setup costs more than a short loop.
const shortString = 24

// scanEscaped finishes a string from the escape at b[j].
func scanEscaped(b []byte, j int) (int, bool, error) {
	for ; j < len(b); j++ {
		switch b[j] {
		case '"':
			return j + 1, true, nil
		case '\\':
			j++
		}
	}
	return 0, false, errSyntax
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, errSyntax
	}
	switch c := b[i]; {
	case c == '"':
		end, _, err := scanString(b, i)
		return end, err
	case c == '{':
		return scanObject(b, i, depth+1, func(_ []byte, i int) (int, error) { return skipValue(b, i, depth+1) })
	case c == '[':
		return scanArray(b, i, depth+1, func(i int) (int, error) { return skipValue(b, i, depth+1) })
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	}
	return 0, errSyntax
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, errSyntax
	}
	return i + len(lit), nil
}

func skipNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	digits := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == digits {
		return 0, errSyntax
	}
	if i < len(b) && b[i] == '.' {
		i++
		f := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == f {
			return 0, errSyntax
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		e := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == e {
			return 0, errSyntax
		}
	}
	return i, nil
}

// scanInt reads a non-negative integer count; any other number reads as 0
// and null leaves v unchanged.
func scanInt(b []byte, i int, v *int64) (int, error) {
	end, err := skipValue(b, i, 2)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range b[i:end] {
		if c < '0' || c > '9' {
			if b[i] != 'n' {
				*v = 0
			}
			return end, nil
		}
		if n > (1<<62)/10 {
			*v = 0
			return end, nil
		}
		n = n*10 + int64(c-'0')
	}
	*v = n
	return end, nil
}
