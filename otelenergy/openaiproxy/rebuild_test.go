package openaiproxy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// chunkGen writes random chunks of the shapes servers stream, from the
// fuzzer's bytes: every member the rebuilder has a rule for, with nulls,
// empty strings, escapes, unknown members, missing and repeated indices.
type chunkGen struct{ b []byte }

func (g *chunkGen) n(k int) int {
	if len(g.b) == 0 {
		return 0
	}
	v := int(g.b[0]) % k
	g.b = g.b[1:]
	return v
}

var genStrings = []string{`""`, `"a"`, `"b c"`, `"\n"`, `"\u00e9"`, `"\ud83d"`, `"\ude00"`, `"{\"x\":"`, `"1}"`, `"é"`}

func (g *chunkGen) str() string { return genStrings[g.n(len(genStrings))] }

func (g *chunkGen) strOrNull() string {
	if g.n(4) == 0 {
		return "null"
	}
	return g.str()
}

func (g *chunkGen) member(parts *[]string, key, val string) {
	*parts = append(*parts, fmt.Sprintf("%q:%s", key, val))
}

func (g *chunkGen) object(members func(p *[]string)) string {
	var p []string
	members(&p)
	// The members in an order of the fuzzer's choosing.
	for i := len(p) - 1; i > 0; i-- {
		j := g.n(i + 1)
		p[i], p[j] = p[j], p[i]
	}
	return "{" + strings.Join(p, ",") + "}"
}

func (g *chunkGen) index(p *[]string, max int) {
	switch g.n(5) {
	case 0: // missing
	case 1:
		g.member(p, "index", "-1")
	default:
		g.member(p, "index", fmt.Sprint(g.n(max)))
	}
}

func (g *chunkGen) function() string {
	return g.object(func(p *[]string) {
		if g.n(2) == 0 {
			g.member(p, "name", g.strOrNull())
		}
		if g.n(3) > 0 {
			g.member(p, "arguments", g.str())
		}
	})
}

func (g *chunkGen) delta() string {
	return g.object(func(p *[]string) {
		if g.n(3) == 0 {
			g.member(p, "role", []string{"null", `"assistant"`}[g.n(2)])
		}
		for _, k := range []string{"content", "reasoning_content", "refusal"} {
			if g.n(2) == 0 {
				g.member(p, k, g.strOrNull())
			}
		}
		if g.n(3) == 0 {
			var calls []string
			for range g.n(3) {
				calls = append(calls, g.object(func(p *[]string) {
					g.index(p, 2)
					if g.n(2) == 0 {
						g.member(p, "id", g.strOrNull())
					}
					if g.n(2) == 0 {
						g.member(p, "type", []string{"null", `"function"`}[g.n(2)])
					}
					if g.n(4) > 0 {
						g.member(p, "function", g.function())
					}
				}))
			}
			g.member(p, "tool_calls", "["+strings.Join(calls, ",")+"]")
		}
		if g.n(6) == 0 {
			g.member(p, "function_call", g.function())
		}
		if g.n(5) == 0 {
			g.member(p, "x_delta", g.strOrNull())
		}
	})
}

func (g *chunkGen) chunk() string {
	return g.object(func(p *[]string) {
		if g.n(2) == 0 {
			g.member(p, "id", []string{`"c1"`, `"c2"`}[g.n(2)])
		}
		if g.n(2) == 0 {
			g.member(p, "object", []string{`"chat.completion.chunk"`, `"text_completion"`}[g.n(2)])
		}
		if g.n(3) == 0 {
			g.member(p, "x_top", []string{"null", "1", `"v"`, `{"a":[1,{"b":null}]}`}[g.n(4)])
		}
		if g.n(4) == 0 {
			g.member(p, "obfuscation", `"pad"`)
		}
		if g.n(3) == 0 {
			g.member(p, "usage", []string{"null", `{"prompt_tokens":3,"completion_tokens":2}`, `{"prompt_tokens":0}`}[g.n(3)])
		}
		if g.n(5) > 0 {
			var choices []string
			for range g.n(3) {
				choices = append(choices, g.object(func(p *[]string) {
					g.index(p, 3)
					switch g.n(3) {
					case 0:
						g.member(p, "text", g.strOrNull())
					default:
						g.member(p, "delta", g.delta())
					}
					if g.n(2) == 0 {
						lp := "null"
						if g.n(3) > 0 {
							lp = fmt.Sprintf(`{"content":[%d],"refusal":null}`, g.n(9))
						}
						g.member(p, "logprobs", lp)
					}
					if g.n(2) == 0 {
						g.member(p, "finish_reason", []string{"null", `"stop"`, `"length"`}[g.n(3)])
					}
					if g.n(4) == 0 {
						g.member(p, "stop_reason", []string{"null", "7"}[g.n(2)])
					}
					if g.n(4) == 0 {
						g.member(p, "token_ids", fmt.Sprintf("[%d]", g.n(9)))
					}
				}))
			}
			g.member(p, "choices", "["+strings.Join(choices, ",")+"]")
		}
	})
}

// refRebuild is the rebuilder's rules written again, plainly, over
// encoding/json's maps: the reference FuzzRebuild checks the rebuilder
// against.
func refRebuild(chunks []string) any {
	top := refObject{}
	for _, c := range chunks {
		var m map[string]any
		d := json.NewDecoder(strings.NewReader(c))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			panic(err)
		}
		top.merge(kindTop, m)
	}
	return top.value(kindTop)
}

// refMember is what the reference keeps of one member.
type refMember struct {
	rule, kind uint8
	last       any
	hasLast    bool
	str        string
	isStr      bool
	arr        []any
	isArr      bool
	sub        *refObject
	list       []*refElem
}

type refElem struct {
	index int64
	o     refObject
}

type refObject struct {
	keys    []string
	members map[string]*refMember
}

func (o *refObject) merge(kind uint8, m map[string]any) {
	if o.members == nil {
		o.members = map[string]*refMember{}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		name := k
		if kind == kindChoice && k == "message" {
			name = "delta"
		}
		mm := o.members[name]
		if mm == nil {
			r, sk := ruleFor(kind, []byte(k))
			mm = &refMember{rule: uint8(r), kind: sk}
			o.members[name] = mm
			o.keys = append(o.keys, name)
		}
		mm.merge(m[k])
	}
}

func (mm *refMember) merge(v any) {
	switch rule(mm.rule) {
	case ruleDrop:
		return
	case ruleObject:
		if obj, ok := v.(map[string]any); ok {
			if mm.sub == nil {
				mm.sub = &refObject{}
			}
			mm.sub.merge(mm.kind, obj)
			return
		}
		if v == nil && mm.sub != nil {
			return
		}
		mm.sub = nil
	case ruleList:
		if arr, ok := v.([]any); ok {
			mm.hasLast, mm.last = false, nil
			if mm.list == nil {
				mm.list = []*refElem{}
			}
			for _, e := range arr {
				obj, ok := e.(map[string]any)
				if !ok {
					continue
				}
				idx := int64(-2)
				if n, ok := obj["index"].(json.Number); ok {
					if n == "-1" {
						idx = 0
					} else if i, err := n.Int64(); err == nil {
						idx = i
					}
				}
				if idx == -2 {
					idx = 0
					if len(mm.list) > 0 {
						idx = mm.list[len(mm.list)-1].index
					}
				}
				var el *refElem
				for _, x := range mm.list {
					if x.index == idx {
						el = x
					}
				}
				if el == nil {
					el = &refElem{index: idx}
					mm.list = append(mm.list, el)
				}
				el.o.merge(mm.kind, obj)
			}
			return
		}
		if v == nil && mm.list != nil {
			return
		}
		mm.list = nil
	case ruleConcat:
		if s, ok := v.(string); ok {
			if !mm.isStr {
				mm.str = ""
			}
			mm.isStr, mm.hasLast, mm.last = true, false, nil
			mm.str += s
			return
		}
		if v == nil && (mm.isStr || !mm.hasLast) {
			if !mm.isStr && !mm.hasLast {
				mm.hasLast, mm.last = true, nil
			}
			return
		}
		mm.isStr = false
	case ruleArrays:
		if a, ok := v.([]any); ok {
			mm.isArr, mm.hasLast, mm.last = true, false, nil
			mm.arr = append(mm.arr, a...)
			return
		}
		if v == nil && mm.isArr {
			return
		}
		mm.isArr, mm.arr = false, nil
	case ruleNonNull:
		if v == nil && mm.hasLast {
			return
		}
	case ruleNonEmpty:
		if s, ok := v.(string); mm.hasLast && (v == nil || ok && s == "") {
			return
		}
	}
	mm.hasLast, mm.last = true, v
}

func (o *refObject) value(kind uint8) any {
	out := map[string]any{}
	if _, ok := o.members["role"]; kind == kindMessage && !ok {
		out["role"] = "assistant"
	}
	for _, k := range o.keys {
		mm := o.members[k]
		if rule(mm.rule) == ruleDrop {
			continue
		}
		name := k
		if kind == kindChoice && k == "delta" {
			name = "message"
		}
		var v any
		switch {
		case rule(mm.rule) == ruleObject && mm.sub != nil:
			v = mm.sub.value(mm.kind)
		case rule(mm.rule) == ruleList && !mm.hasLast:
			es := slices.Clone(mm.list)
			slices.SortStableFunc(es, func(a, b *refElem) int { return cmp.Compare(a.index, b.index) })
			l := []any{}
			for _, e := range es {
				l = append(l, e.o.value(mm.kind))
			}
			v = l
		case rule(mm.rule) == ruleConcat && mm.isStr:
			v = mm.str
			if mm.str == "" && kind == kindMessage && k == "content" && o.hasCalls() {
				v = nil
			}
		case rule(mm.rule) == ruleArrays && mm.isArr:
			v = append([]any{}, mm.arr...)
		case kind == kindTop && k == "object" && mm.last == "chat.completion.chunk":
			v = "chat.completion"
		default:
			v = mm.last
		}
		out[name] = v
	}
	return out
}

func (o *refObject) hasCalls() bool {
	if m := o.members["tool_calls"]; m != nil && len(m.list) > 0 {
		return true
	}
	m := o.members["function_call"]
	return m != nil && m.sub != nil
}

// FuzzRebuild rebuilds random streams of chunks shaped as servers send
// them and checks the body against refRebuild, value for value; and
// feeds the rebuilder arbitrary bytes, which it must reject or rebuild
// into valid JSON within its bound, never panicking.
func FuzzRebuild(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, []byte(`{"choices":[{"delta":{"content":"a"}}]}`))
	f.Add([]byte("seed of shapes, and more bytes for more chunks of them"), []byte(`{"choices":[{"index":0,"text":"x"}],"usage":null}`))
	f.Fuzz(func(t *testing.T, shape, raw []byte) {
		g := &chunkGen{b: shape}
		var chunks []string
		for range 1 + g.n(6) {
			chunks = append(chunks, g.chunk())
		}
		rb := newRebuilder(1 << 20)
		for _, c := range chunks {
			if err := rb.add([]byte(c)); err != nil {
				t.Fatalf("rejected %s: %v", c, err)
			}
		}
		body := rb.body()
		var got any
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if err := d.Decode(&got); err != nil {
			t.Fatalf("rebuilt invalid JSON %s from %q: %v", body, chunks, err)
		}
		if want := refRebuild(chunks); !reflect.DeepEqual(normalizeStrings(got), normalizeStrings(want)) {
			w, _ := json.Marshal(want)
			t.Fatalf("chunks %q\nrebuilt %s\nreference %s", chunks, body, w)
		}

		rb = newRebuilder(4096)
		for _, c := range bytes.Split(raw, []byte("\n")) {
			if err := rb.add(c); err != nil {
				return
			}
			if rb.held > 4096+2*len(c)+256 {
				t.Fatalf("held %d past a bound of 4096", rb.held)
			}
		}
		if out := rb.body(); json.Valid(raw) && !json.Valid(out) && !bytes.ContainsAny(raw, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f") {
			t.Fatalf("rebuilt invalid JSON %q from valid %q", out, raw)
		}
	})
}

// normalizeStrings replaces the strings in v by their UTF-8 form, as
// decoding the concatenation of the escaped pieces gives it: a surrogate
// pair split across two pieces decodes whole in the rebuilt body and as
// two U+FFFD in the reference's pieces, so both become their runes'
// valid form, with U+FFFD sequences folded.
func normalizeStrings(v any) any {
	switch v := v.(type) {
	case string:
		return strings.ReplaceAll(strings.ToValidUTF8(strings.ReplaceAll(v, "\U0001F600", "\uFFFD\uFFFD"), "\uFFFD"), "\uFFFD\uFFFD", "\uFFFD")
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = normalizeStrings(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalizeStrings(e)
		}
		return out
	}
	return v
}
