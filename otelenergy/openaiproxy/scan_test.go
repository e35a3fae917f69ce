package openaiproxy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// reference reads a chunk with encoding/json into maps: the simple, slow
// model of scanChunk. ok is false for invalid JSON and for input the two
// read differently by design: duplicate or escaped keys.
func reference(b []byte) (c chunkInfo, ok bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var top map[string]any
	if d.Decode(&top) != nil || d.InputOffset() != int64(len(bytes.TrimRight(b, " \t\r\n"))) || top == nil || oddKeys(b) {
		return c, false
	}
	str := func(x any) bool { s, ok := x.(string); return ok && s != "" }
	n := func(x any) int64 {
		s, ok := x.(json.Number)
		v, err := strconv.ParseInt(string(s), 10, 64)
		if !ok || err != nil || v < 0 || v > 1<<62 || strings.HasPrefix(string(s), "-") {
			return 0
		}
		return v
	}
	c.predicted, c.tokens = -1, -1
	if ch, ok := top["choices"].([]any); ok {
		c.hasChoices = true
		c.choices = len(ch)
		for _, e := range ch {
			m, _ := e.(map[string]any)
			content := str(m["text"])
			for _, k := range []string{"delta", "message"} {
				if d, ok := m[k].(map[string]any); ok {
					tc, _ := d["tool_calls"].([]any)
					_, fc := d["function_call"].(map[string]any)
					content = content || str(d["content"]) || str(d["reasoning_content"]) || str(d["reasoning"]) ||
						str(d["refusal"]) || len(tc) > 0 || fc
				}
			}
			var logprobs, ids int64
			if lp, ok := m["logprobs"].(map[string]any); ok {
				for _, k := range []string{"content", "refusal", "tokens"} {
					a, _ := lp[k].([]any)
					logprobs += int64(len(a))
				}
			}
			if a, ok := m["token_ids"].([]any); ok {
				ids = int64(len(a))
			}
			if content {
				c.contentChoices++
				if s := max(logprobs, ids); s > 0 {
					c.stated += s
				} else {
					c.unstated++
				}
			}
			if v, ok := m["finish_reason"]; ok && v != nil {
				c.finished = true
			}
		}
	}
	if v, ok := top["usage"]; ok && v == nil {
		c.usageNull = true
	}
	if u, ok := top["usage"].(map[string]any); ok {
		c.hasUsage = true
		c.usageZero = allZero(u)
		c.promptTokens, c.completion = n(u["prompt_tokens"]), n(u["completion_tokens"])
		if d, ok := u["prompt_tokens_details"].(map[string]any); ok {
			c.cachedTokens = n(d["cached_tokens"])
		}
	}
	if t, ok := top["timings"].(map[string]any); ok {
		if v, ok := t["predicted_n"]; ok && v != nil {
			c.predicted = n(v)
		}
	}
	if a, ok := top["tokens"].([]any); ok {
		c.tokens = len(a)
	}
	if v, ok := top["error"]; ok && v != nil {
		c.hasError = true
	}
	if top["object"] == "error" {
		c.hasError = true
	}
	return c, true
}

// withoutAliases is c without its slices into the scanned bytes, for
// comparing two reads.
func (c chunkInfo) withoutAliases() chunkInfo {
	c.model = nil
	return c
}

// allZero reports whether every number in x is zero.
func allZero(x any) bool {
	switch v := x.(type) {
	case json.Number:
		m, _, _ := strings.Cut(strings.ToLower(string(v)), "e")
		return !strings.ContainsAny(m, "123456789")
	case map[string]any:
		for _, e := range v {
			if !allZero(e) {
				return false
			}
		}
	case []any:
		for _, e := range v {
			if !allZero(e) {
				return false
			}
		}
	}
	return true
}

// oddKeys reports whether some object in b repeats a key or spells one with
// an escape.
func oddKeys(b []byte) bool {
	d := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		obj  bool
		key  bool // the next string token is a key
		seen map[string]bool
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.key {
			if k, ok := tok.(string); ok {
				if top.seen[k] || !bytes.Contains(b, []byte(`"`+k+`"`)) {
					return true
				}
				top.seen[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, key: true, seen: map[string]bool{}})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].key = true
		}
	}
}

func FuzzScanChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`,
		`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`,
		`{"choices":[{"text":"","finish_reason":"length"},{"text":"x"}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`,
		`{"model":"a\"b","usage":null,"x":[1,2.5e3,-0.1,true,false,null,{"y":[]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"choices":[{"delta":{"content":"a","tool_calls":[{"index":0}]}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got chunkInfo
		err := scanChunk(b, &got)
		// A chunk read again after its envelope was kept reads the same,
		// from its choices on.
		var env envelope
		var first, again chunkInfo
		err1 := scanChunkAfter(b, &first, &env)
		err2 := scanChunkAfter(b, &again, &env)
		if (err1 == nil) != (err == nil) || (err2 == nil) != (err == nil) {
			t.Fatalf("%q: errors %v, %v after the envelope, %v alone", b, err1, err2, err)
		}
		if err == nil {
			alone := got
			for _, c := range []chunkInfo{first, again} {
				if string(c.model) != string(alone.model) || c.modelEscaped != alone.modelEscaped {
					t.Fatalf("%q: model %q, alone %q", b, c.model, alone.model)
				}
				c.model, alone.model = nil, nil
				if !reflect.DeepEqual(c, alone) {
					t.Fatalf("%q: after the envelope\n got %+v\nwant %+v", b, c, alone)
				}
				alone.model = got.model
			}
			// The template, when b is one, read with other strings.
			if env.tmplOK {
				for _, s := range []string{`""`, `"x"`, `"a\"b"`, `"\u00e9\\"`, `"` + strings.Repeat("z", 40) + `"`} {
					b2 := append(append(append([]byte{}, env.pre[:len(env.pre)-1]...), s...), env.suf[1:]...)
					var fromTmpl, whole chunkInfo
					e1 := scanChunkAfter(b2, &fromTmpl, &env)
					e2 := scanChunk(b2, &whole)
					if (e1 == nil) != (e2 == nil) {
						t.Fatalf("%q: template %v, alone %v", b2, e1, e2)
					}
					if e1 == nil && (!reflect.DeepEqual(fromTmpl.withoutAliases(), whole.withoutAliases()) || string(fromTmpl.model) != string(whole.model)) {
						t.Fatalf("%q from the template of %q:\n got %+v\nwant %+v", b2, b, fromTmpl, whole)
					}
				}
			}
		}
		want, ok := reference(b)
		if !ok || err != nil {
			// The scanner validates only what it walks; it may accept
			// what encoding/json rejects, never the reverse.
			if ok && err != nil {
				t.Fatalf("scanner rejected valid JSON %q: %v", b, err)
			}
			return
		}
		got.model, got.modelEscaped, got.contentBytes, got.usageAt, got.texts, got.textAt, got.calls = nil, false, 0, memberSpan{}, 0, span{}, false
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
		}
	})
}

// BenchmarkScanChunk reads one typical chat chunk, vLLM's shape.
func BenchmarkScanChunk(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-3f9c2a1b8e7d4c6f","object":"chat.completion.chunk","created":1758620500,"model":"llama-3.1-8b-instruct","choices":[{"index":0,"delta":{"content":" tok17"},"logprobs":null,"finish_reason":null}]}`)
	var c chunkInfo
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	cpu := cpuTime()
	for b.Loop() {
		if err := scanChunk(chunk, &c); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}
