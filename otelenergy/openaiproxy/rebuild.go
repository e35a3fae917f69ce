package openaiproxy

import (
	"cmp"
	"errors"
	"slices"
)

// errResponseTooLarge reports a rebuilt body above its bound.
var errResponseTooLarge = errors.New("openaiproxy: the rebuilt response is above its bound")

// rebuilder rebuilds the JSON body a server would have returned for a
// non-streaming completion from the chunks of the stream it sent instead
// (upstream streaming, [WithUpstreamStreaming]). It keeps the members in the
// order they first appear and applies these rules, by where a member sits;
// docs/proxy.md states them for users:
//
//   - top level: "object" "chat.completion.chunk" becomes "chat.completion"
//     (a text completion's "text_completion" stays); "choices" are merged by
//     their "index" and written in index order; "usage" is the last non-null
//     one sent; "obfuscation" (OpenAI's padding of stream chunks) is
//     dropped; every other member, known (id, created, model,
//     system_fingerprint, service_tier) or not, is the value last sent.
//   - a choice: "delta" becomes "message"; "text" is concatenated;
//     "logprobs" is merged as below; "finish_reason" and vLLM's
//     "stop_reason" are the last non-null value; vLLM's "token_ids" arrays
//     are concatenated; anything else is the value last sent.
//   - a message: "content", "reasoning_content", "reasoning" and "refusal"
//     are concatenated (null when no piece was a string, and an empty
//     "content" beside tool calls or a function call is null, as
//     non-streaming bodies have it); "role" is the
//     last non-null value, "assistant" when no chunk names it; "tool_calls"
//     are merged by their "index", which
//     the rebuilt calls do not carry; the legacy "function_call" is merged
//     as a function; anything else is the value last sent.
//   - a tool call: "id" is the last non-empty string, "type" the last
//     non-null value, "function" merged as a function; a function's
//     "name" is the last non-empty string and "arguments" concatenated.
//   - logprobs: every member whose value is an array is concatenated (chat's
//     "content" and "refusal"; a text completion's "tokens",
//     "token_logprobs", "top_logprobs" and "text_offset"), null where no
//     piece was an array; anything else is the value last sent.
//
// Strings are concatenated in their escaped form, which decodes to the
// concatenation of the pieces (a surrogate pair split across chunks
// included). What it holds is bounded by limit: past it, add fails with
// errResponseTooLarge; held counts the bytes it holds, for a budget across
// requests.
//
// A rebuilder is used by one goroutine.
type rebuilder struct {
	top   jobj
	limit int
	held  int
}

// rule is how a member's values merge.
type rule uint8

const (
	ruleLast     rule = iota // the value last sent
	ruleNonNull              // the last non-null value
	ruleNonEmpty             // the last non-empty string, else the last value
	ruleConcat               // strings concatenated
	ruleArrays               // arrays concatenated
	ruleObject               // an object merged by its kind's rules
	ruleList                 // an array of objects merged by their "index"
	ruleDrop                 // not in the rebuilt body
)

// Kinds of object, which choose their members' rules.
const (
	kindTop = iota
	kindChoice
	kindMessage
	kindToolCall
	kindFunction
	kindLogprobs
)

// jobj is an object being rebuilt: its members in first-seen order.
type jobj struct {
	kind    uint8
	members []*jmember
}

// jmember is one member of a jobj.
type jmember struct {
	key  []byte // raw key contents, as sent
	out  string // the key written, when it differs ("delta" -> "message")
	rule rule
	kind uint8 // the kind of a ruleObject member's object or a ruleList's elements

	raw   []byte // the last value kept, for the rules that keep one
	str   []byte // ruleConcat: the escaped contents so far
	isStr bool   // ruleConcat: some piece was a string
	arr   []byte // ruleArrays: the elements so far, comma-separated
	isArr bool   // ruleArrays: some piece was an array
	sub   *jobj  // ruleObject
	list  []*jelem
}

// jelem is an element of a ruleList member.
type jelem struct {
	index int64
	o     jobj
}

func newRebuilder(limit int) *rebuilder {
	return &rebuilder{limit: limit, top: jobj{kind: kindTop}}
}

// ruleFor returns the rule of member key in an object of kind, and the
// kind of the object (or elements) it holds.
func ruleFor(kind uint8, key []byte) (rule, uint8) {
	k := string(key)
	switch kind {
	case kindTop:
		switch k {
		case "choices":
			return ruleList, kindChoice
		case "usage":
			return ruleNonNull, 0
		case "obfuscation":
			return ruleDrop, 0
		}
	case kindChoice:
		switch k {
		case "delta", "message":
			return ruleObject, kindMessage
		case "text":
			return ruleConcat, 0
		case "logprobs":
			return ruleObject, kindLogprobs
		case "finish_reason", "stop_reason":
			return ruleNonNull, 0
		case "token_ids":
			return ruleArrays, 0
		}
	case kindMessage:
		switch k {
		case "content", "reasoning_content", "reasoning", "refusal":
			return ruleConcat, 0
		case "role":
			return ruleNonNull, 0
		case "tool_calls":
			return ruleList, kindToolCall
		case "function_call":
			return ruleObject, kindFunction
		}
	case kindToolCall:
		switch k {
		case "index":
			return ruleDrop, 0
		case "id":
			return ruleNonEmpty, 0
		case "type":
			return ruleNonNull, 0
		case "function":
			return ruleObject, kindFunction
		}
	case kindFunction:
		switch k {
		case "name":
			return ruleNonEmpty, 0
		case "arguments":
			return ruleConcat, 0
		}
	case kindLogprobs:
		return ruleArrays, 0
	}
	return ruleLast, 0
}

// add merges one chunk, the data of one event. It returns errSyntax for
// a chunk that is not a JSON object and errResponseTooLarge past the
// bound; the rebuilder is then not to be used further.
func (rb *rebuilder) add(b []byte) error {
	i := skipWS(b, 0)
	end, err := rb.mergeObject(&rb.top, b, i, 0)
	if err != nil {
		return err
	}
	if skipWS(b, end) != len(b) {
		return errSyntax
	}
	if rb.held > rb.limit {
		return errResponseTooLarge
	}
	return nil
}

// mergeObject merges the object at b[i] into o.
func (rb *rebuilder) mergeObject(o *jobj, b []byte, i, depth int) (int, error) {
	return scanObject(b, i, depth, func(key []byte, i int) (int, error) {
		m := o.member(key)
		if m == nil {
			r, kind := ruleFor(o.kind, key)
			m = &jmember{key: slices.Clone(key), rule: r, kind: kind}
			if o.kind == kindChoice && string(key) == "delta" {
				m.out = "message"
			}
			rb.held += len(key) + 64
			o.members = append(o.members, m)
		}
		return rb.mergeValue(m, b, i, depth+1)
	})
}

// member returns o's member named key, or nil. A choice's "delta" and
// "message" are one member.
func (o *jobj) member(key []byte) *jmember {
	for _, m := range o.members {
		if string(m.key) == string(key) || (m.out != "" && m.out == string(key)) {
			return m
		}
	}
	return nil
}

// mergeValue merges the value at b[i] into m by m's rule.
func (rb *rebuilder) mergeValue(m *jmember, b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, errSyntax
	}
	c := b[i]
	switch m.rule {
	case ruleDrop:
		return skipValue(b, i, depth)
	case ruleObject:
		if c == '{' {
			if m.sub == nil {
				m.sub = &jobj{kind: m.kind}
			}
			return rb.mergeObject(m.sub, b, i, depth)
		}
		if m.sub != nil && c == 'n' {
			return skipValue(b, i, depth)
		}
	case ruleList:
		if c == '[' {
			m.raw = nil
			return scanArray(b, i, depth, func(i int) (int, error) {
				if i >= len(b) || b[i] != '{' {
					return skipValue(b, i, depth+1)
				}
				e, err := rb.element(m, b, i, depth+1)
				if err != nil {
					return 0, err
				}
				return rb.mergeObject(&e.o, b, i, depth+1)
			})
		}
		if m.list != nil && c == 'n' {
			return skipValue(b, i, depth)
		}
	case ruleConcat:
		if c == '"' {
			end, _, err := scanString(b, i)
			if err != nil {
				return 0, err
			}
			m.isStr = true
			m.raw = nil
			m.str = rb.appendHeld(m.str, b[i+1:end-1])
			return end, nil
		}
		if c == 'n' && (m.isStr || m.raw == nil) {
			end, err := skipValue(b, i, depth)
			if err == nil && m.raw == nil && !m.isStr {
				m.raw = rb.setHeld(m.raw, b[i:end])
			}
			return end, err
		}
		m.isStr, m.str = false, m.str[:0]
	case ruleArrays:
		if c == '[' {
			start := skipWS(b, i+1)
			end, err := skipValue(b, i, depth)
			if err != nil {
				return 0, err
			}
			inner := trimWS(b[start : end-1])
			if len(inner) > 0 {
				if len(m.arr) > 0 {
					m.arr = rb.appendHeld(m.arr, comma)
				}
				m.arr = rb.appendHeld(m.arr, inner)
			}
			m.isArr, m.raw = true, nil
			return end, nil
		}
		if c == 'n' && m.isArr {
			return skipValue(b, i, depth)
		}
		m.isArr, m.arr = false, m.arr[:0]
	}
	end, err := skipValue(b, i, depth)
	if err != nil {
		return 0, err
	}
	v := b[i:end]
	switch {
	case m.rule == ruleNonNull && c == 'n' && m.raw != nil:
	case m.rule == ruleNonEmpty && m.raw != nil && (c == 'n' || (c == '"' && len(v) == 2)):
		// null or "": the value kept stands.
	default:
		m.raw = rb.setHeld(m.raw, v)
		if m.rule == ruleObject {
			m.sub = nil
		}
		if m.rule == ruleList {
			m.list = nil
		}
	}
	return end, nil
}

var comma = []byte{','}

// element returns the element of list member m that the object at b[i]
// merges into, by its "index": a missing index is the last element's (or
// 0), and -1 is 0, as some servers send for a single tool call.
func (rb *rebuilder) element(m *jmember, b []byte, i, depth int) (*jelem, error) {
	idx := int64(-2)
	if _, err := scanObject(b, i, depth, func(key []byte, i int) (int, error) {
		if string(key) == "index" && i < len(b) && (b[i] == '-' || (b[i] >= '0' && b[i] <= '9')) {
			end, err := skipNumber(b, i)
			if err != nil {
				return 0, err
			}
			if string(b[i:end]) == "-1" {
				idx = 0
				return end, nil
			}
			var v int64
			if _, err := scanInt(b, i, &v); err != nil {
				return 0, err
			}
			idx = v
			return end, nil
		}
		return skipValue(b, i, depth+1)
	}); err != nil {
		return nil, err
	}
	if idx == -2 {
		idx = 0
		if n := len(m.list); n > 0 {
			idx = m.list[n-1].index
		}
	}
	for _, e := range m.list {
		if e.index == idx {
			return e, nil
		}
	}
	if len(m.list) >= maxListElements {
		return nil, errResponseTooLarge
	}
	e := &jelem{index: idx, o: jobj{kind: m.kind}}
	rb.held += 96
	m.list = append(m.list, e)
	return e, nil
}

// maxListElements bounds the choices, or one choice's tool calls, that a
// rebuilt body holds: OpenAI's n is at most 128.
const maxListElements = 1024

// appendHeld appends p to dst, counting what dst grows by as held.
func (rb *rebuilder) appendHeld(dst, p []byte) []byte {
	c := cap(dst)
	dst = append(dst, p...)
	rb.held += cap(dst) - c
	return dst
}

// setHeld sets dst to a copy of v, counting what dst grows by as held.
func (rb *rebuilder) setHeld(dst, v []byte) []byte {
	return rb.appendHeld(dst[:0], v)
}

func trimWS(b []byte) []byte {
	i, j := 0, len(b)
	for i < j && isWS(b[i]) {
		i++
	}
	for j > i && isWS(b[j-1]) {
		j--
	}
	return b[i:j]
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// body returns the rebuilt JSON body.
func (rb *rebuilder) body() []byte {
	out := make([]byte, 0, rb.held+64)
	return rb.appendObject(out, &rb.top)
}

func (rb *rebuilder) appendObject(out []byte, o *jobj) []byte {
	out = append(out, '{')
	first := true
	if o.kind == kindMessage && o.member([]byte("role")) == nil {
		// A chat completion's message is the assistant's, also where the
		// stream never said so.
		out = append(out, `"role":"assistant"`...)
		first = false
	}
	for _, m := range o.members {
		if m.rule == ruleDrop {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, '"')
		if m.out != "" {
			out = append(out, m.out...)
		} else {
			out = append(out, m.key...)
		}
		out = append(out, '"', ':')
		out = rb.appendValue(out, o, m)
	}
	return append(out, '}')
}

func (rb *rebuilder) appendValue(out []byte, o *jobj, m *jmember) []byte {
	kind := o.kind
	switch {
	case m.rule == ruleObject && m.sub != nil:
		return rb.appendObject(out, m.sub)
	case m.rule == ruleList && m.raw == nil:
		es := slices.Clone(m.list)
		slices.SortStableFunc(es, func(a, b *jelem) int { return cmp.Compare(a.index, b.index) })
		out = append(out, '[')
		for k, e := range es {
			if k > 0 {
				out = append(out, ',')
			}
			out = rb.appendObject(out, &e.o)
		}
		return append(out, ']')
	case m.rule == ruleConcat && m.isStr && len(m.str) == 0 && kind == kindMessage && string(m.key) == "content" && callsOf(o):
		// Empty content beside tool calls is null, as non-streaming
		// bodies give it (vLLM's and SGLang's streams send "" first).
		return append(out, "null"...)
	case m.rule == ruleConcat && m.isStr:
		out = append(out, '"')
		out = append(out, m.str...)
		return append(out, '"')
	case m.rule == ruleArrays && m.isArr:
		out = append(out, '[')
		out = append(out, m.arr...)
		return append(out, ']')
	case kind == kindTop && string(m.key) == "object" && string(m.raw) == `"chat.completion.chunk"`:
		return append(out, `"chat.completion"`...)
	case m.raw == nil:
		return append(out, "null"...)
	}
	return append(out, m.raw...)
}

// callsOf reports whether message o has tool calls or a function call.
func callsOf(o *jobj) bool {
	for _, m := range o.members {
		switch string(m.key) {
		case "tool_calls":
			if len(m.list) > 0 {
				return true
			}
		case "function_call":
			if m.sub != nil {
				return true
			}
		}
	}
	return false
}

// finished reports whether every choice seen has a finish_reason.
func (rb *rebuilder) finished() bool {
	ch := rb.top.member([]byte("choices"))
	if ch == nil || len(ch.list) == 0 {
		return false
	}
	for _, e := range ch.list {
		fr := e.o.member([]byte("finish_reason"))
		if fr == nil || fr.raw == nil || string(fr.raw) == "null" {
			return false
		}
	}
	return true
}
