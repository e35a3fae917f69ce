package gguf

import (
	"math/rand/v2"
	"slices"
	"strings"
)

// The tiny Llama's shape: 2 layers, hidden size 256, 8 query and 4 KV
// heads (a head is 32 wide), a feed-forward width of 512 and a vocabulary
// of 512, about 1.4 M parameters and 5.8 MB in F32.
const (
	TinyLayers  = 2
	TinyHidden  = 256
	TinyHeads   = 8
	TinyKVHeads = 4
	TinyFFN     = 512
	TinyVocab   = 512
	TinyContext = 4096

	headDim = TinyHidden / TinyHeads
)

// Token ids of the tiny vocabulary: the 256 byte tokens first, in byte
// order, then the two control tokens, then one token per merge.
const (
	TinyBOS = 256
	TinyEOS = 257

	firstMerged = 258
)

// Token types, as llama.cpp and Ollama read tokenizer.ggml.token_type.
const (
	tokenNormal  = 1
	tokenControl = 3
)

// TinyLlama builds the tiny random Llama for seed: architecture llama, F32
// weights drawn from seed, and a byte-level BPE tokenizer (GPT-2's byte
// mapping, tokenizer.ggml.model gpt2, pre-tokenizer default) whose 254
// merges, drawn from seed too, build tokens of printable ASCII.
//
// Its output never ends by itself: the output-weight rows of the EOS and
// BOS tokens are zero, so their logit is 0, far below the top few
// hundred logits (the last hidden state is RMS-normalized to 1 per
// element, and each other row's weights have unit variance, so those
// logits spread with a standard deviation of 16), and every completion
// runs to max_tokens with finish_reason "length", at any temperature
// with the engines' default top-k and top-p. The rows of the byte tokens
// outside printable ASCII are zero as well, so that the text is valid
// UTF-8 however a stream splits it.
func TinyLlama(seed uint64) Model {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	tokens, merges := tinyVocabulary(rng)
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = tokenNormal
	}
	types[TinyBOS], types[TinyEOS] = tokenControl, tokenControl

	m := Model{Metadata: []KV{
		{"general.architecture", "llama"},
		{"general.name", "otelenergy-tiny"},
		{"general.file_type", uint32(0)}, // all F32
		{"general.alignment", uint32(Alignment)},
		{"llama.context_length", uint32(TinyContext)},
		{"llama.embedding_length", uint32(TinyHidden)},
		{"llama.block_count", uint32(TinyLayers)},
		{"llama.feed_forward_length", uint32(TinyFFN)},
		{"llama.attention.head_count", uint32(TinyHeads)},
		{"llama.attention.head_count_kv", uint32(TinyKVHeads)},
		{"llama.rope.dimension_count", uint32(headDim)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.vocab_size", uint32(TinyVocab)},
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "default"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.merges", merges},
		{"tokenizer.ggml.bos_token_id", uint32(TinyBOS)},
		{"tokenizer.ggml.eos_token_id", uint32(TinyEOS)},
		{"tokenizer.ggml.add_bos_token", true},
	}}

	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	normal := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		return v
	}
	add := func(name string, data []float32, dims ...uint64) {
		m.Tensors = append(m.Tensors, Tensor{Name: name, Dims: dims, Data: data})
	}
	const (
		h, kv, ff, v = TinyHidden, TinyKVHeads * headDim, TinyFFN, TinyVocab
		init         = 0.05 // the inner weights' standard deviation: activations stay O(1)
	)
	add("token_embd.weight", normal(h*v, 1), h, v)
	for l := range TinyLayers {
		p := "blk." + string(rune('0'+l)) + "."
		add(p+"attn_norm.weight", ones(h), h)
		add(p+"attn_q.weight", normal(h*h, init), h, h)
		add(p+"attn_k.weight", normal(h*kv, init), h, kv)
		add(p+"attn_v.weight", normal(h*kv, init), h, kv)
		add(p+"attn_output.weight", normal(h*h, init), h, h)
		add(p+"ffn_norm.weight", ones(h), h)
		add(p+"ffn_gate.weight", normal(h*ff, init), h, ff)
		add(p+"ffn_up.weight", normal(h*ff, init), h, ff)
		add(p+"ffn_down.weight", normal(ff*h, init), ff, h)
	}
	add("output_norm.weight", ones(h), h)
	out := normal(h*v, 1)
	for id := range v {
		if !printable(tokens[id], id) {
			clear(out[id*h : (id+1)*h])
		}
	}
	add("output.weight", out, h, v)
	return m
}

// printable reports whether token id decodes to printable ASCII: a merged
// token, or a byte token of 0x20 to 0x7e.
func printable(token string, id int) bool {
	switch {
	case id >= firstMerged:
		return true
	case id == TinyBOS || id == TinyEOS:
		return false
	}
	b := byteOf[[]rune(token)[0]]
	return b >= 0x20 && b <= 0x7e
}

// byteToRune is GPT-2's byte-level mapping: bytes that print stand for
// themselves, and the others (controls, space, DEL, NBSP, soft hyphen)
// are shifted to U+0100 and up, in byte order. byteOf inverts it.
var byteToRune, byteOf = func() ([256]rune, map[rune]byte) {
	var m [256]rune
	inv := map[rune]byte{}
	next := rune(0x100)
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			m[b] = rune(b)
		} else {
			m[b] = next
			next++
		}
		inv[m[b]] = byte(b)
	}
	return m, inv
}()

// tinyVocabulary returns the 512 tokens and the 254 merges drawn from
// rng. Each merge joins two tokens of lowercase letters, or the space's
// token and one of them, into a new token of at most four characters;
// every merge's parts precede it, and its result is a new token.
func tinyVocabulary(rng *rand.Rand) (tokens, merges []string) {
	for b := range 256 {
		tokens = append(tokens, string(byteToRune[b]))
	}
	tokens = append(tokens, "<|begin_of_text|>", "<|end_of_text|>")
	space := string(byteToRune[' '])
	var parts []string // the letter tokens, and merged ones, a merge may join
	for c := 'a'; c <= 'z'; c++ {
		parts = append(parts, string(c))
	}
	for len(tokens) < TinyVocab {
		left := parts[rng.IntN(len(parts))]
		if rng.IntN(4) == 0 {
			left = space
		}
		right := parts[rng.IntN(len(parts))]
		tok := left + right
		if len([]rune(tok)) > 4 || slices.Contains(tokens, tok) {
			continue
		}
		merges = append(merges, left+" "+right)
		tokens = append(tokens, tok)
		if !strings.HasPrefix(tok, space) {
			parts = append(parts, tok)
		}
	}
	return tokens, merges
}
