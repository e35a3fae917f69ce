package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
)

// parsed is a GGUF file as a reader independent of the writer sees it.
type parsed struct {
	version  uint32
	kv       map[string]any
	keys     []string
	tensors  []parsedTensor
	dataOff  uint64
	fileSize uint64
}

type parsedTensor struct {
	name string
	dims []uint64
	typ  uint32
	off  uint64
}

// parse reads a GGUF v3 file following the specification's layout,
// element by element, rejecting anything unexpected.
func parse(b []byte) (*parsed, error) {
	r := bytes.NewReader(b)
	var err error
	rd := func(v any) {
		if err == nil {
			err = binary.Read(r, binary.LittleEndian, v)
		}
	}
	str := func() string {
		var n uint64
		rd(&n)
		if err != nil || n > uint64(r.Len()) {
			err = errors.Join(err, io.ErrUnexpectedEOF)
			return ""
		}
		s := make([]byte, n)
		_, e := io.ReadFull(r, s)
		err = errors.Join(err, e)
		return string(s)
	}
	var magic [4]byte
	rd(&magic)
	if string(magic[:]) != "GGUF" {
		return nil, fmt.Errorf("magic %q", magic)
	}
	p := &parsed{kv: map[string]any{}, fileSize: uint64(len(b))}
	var nt, nkv uint64
	rd(&p.version)
	rd(&nt)
	rd(&nkv)
	var scalar func(typ uint32) any
	scalar = func(typ uint32) any {
		switch typ {
		case typeUint32:
			var v uint32
			rd(&v)
			return v
		case typeInt32:
			var v int32
			rd(&v)
			return v
		case typeFloat32:
			var v float32
			rd(&v)
			return v
		case typeBool:
			var v uint8
			rd(&v)
			if v > 1 {
				err = errors.Join(err, fmt.Errorf("bool %d", v))
			}
			return v == 1
		case typeString:
			return str()
		case typeArray:
			var et uint32
			var n uint64
			rd(&et)
			rd(&n)
			out := []any{}
			for range n {
				if err != nil {
					break
				}
				out = append(out, scalar(et))
			}
			return out
		}
		err = errors.Join(err, fmt.Errorf("value type %d", typ))
		return nil
	}
	for range nkv {
		k := str()
		var typ uint32
		rd(&typ)
		p.kv[k] = scalar(typ)
		p.keys = append(p.keys, k)
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", k, err)
		}
	}
	for range nt {
		t := parsedTensor{name: str()}
		var nd uint32
		rd(&nd)
		t.dims = make([]uint64, nd)
		for i := range t.dims {
			rd(&t.dims[i])
		}
		rd(&t.typ)
		rd(&t.off)
		p.tensors = append(p.tensors, t)
	}
	if err != nil {
		return nil, err
	}
	pos := uint64(len(b) - r.Len())
	p.dataOff = (pos + Alignment - 1) / Alignment * Alignment
	return p, nil
}

func TestTinyLlamaLayout(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, TinyLlama(1)); err != nil {
		t.Fatal(err)
	}
	p, err := parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if p.version != 3 {
		t.Errorf("version %d, want 3", p.version)
	}
	for k, want := range map[string]any{
		"general.architecture":          "llama",
		"llama.block_count":             uint32(2),
		"llama.embedding_length":        uint32(256),
		"llama.attention.head_count":    uint32(8),
		"llama.attention.head_count_kv": uint32(4),
		"llama.feed_forward_length":     uint32(512),
		"tokenizer.ggml.model":          "gpt2",
		"tokenizer.ggml.pre":            "default",
		"tokenizer.ggml.eos_token_id":   uint32(TinyEOS),
	} {
		if got := p.kv[k]; got != want {
			t.Errorf("%s = %v (%T), want %v", k, got, got, want)
		}
	}
	tokens, _ := p.kv["tokenizer.ggml.tokens"].([]any)
	merges, _ := p.kv["tokenizer.ggml.merges"].([]any)
	types, _ := p.kv["tokenizer.ggml.token_type"].([]any)
	if len(tokens) != TinyVocab || len(types) != TinyVocab || len(merges) < 200 {
		t.Fatalf("%d tokens, %d token types, %d merges; want %d, %d and a few hundred", len(tokens), len(types), len(merges), TinyVocab, TinyVocab)
	}
	// Every merge joins two tokens that precede its result, which is the
	// next token: the rule a BPE tokenizer needs to reach every token.
	index := map[string]int{}
	for i, tok := range tokens {
		if _, dup := index[tok.(string)]; dup {
			t.Fatalf("token %d %q repeats", i, tok)
		}
		index[tok.(string)] = i
	}
	for k, m := range merges {
		left, right, ok := strings.Cut(m.(string), " ")
		l, lok := index[left]
		r, rok := index[right]
		res, resok := index[left+right]
		if !ok || !lok || !rok || !resok || res != firstMerged+k || l >= res || r >= res {
			t.Fatalf("merge %d %q: parts %d %d, result %d; want parts before result %d", k, m, l, r, res, firstMerged+k)
		}
	}

	var params uint64
	end := p.dataOff
	for _, tn := range p.tensors {
		n := uint64(1)
		for _, d := range tn.dims {
			n *= d
		}
		params += n
		if tn.typ != tensorF32 || tn.off%Alignment != 0 || p.dataOff+tn.off < end {
			t.Errorf("tensor %s: type %d, offset %d overlapping or unaligned", tn.name, tn.typ, tn.off)
		}
		end = p.dataOff + tn.off + 4*n
	}
	if len(p.tensors) != 3+9*TinyLayers || params < 1_400_000 || params > 1_500_000 {
		t.Errorf("%d tensors, %d parameters; want %d and about 1.4 M", len(p.tensors), params, 3+9*TinyLayers)
	}
	if pad(end) != p.fileSize {
		t.Errorf("the data ends at %d (padded %d), the file at %d", end, pad(end), p.fileSize)
	}

	// The EOS row of the output weights is zero, and a printable token's
	// row is not.
	out := p.tensors[len(p.tensors)-1]
	row := func(id int) []float32 {
		off := p.dataOff + out.off + uint64(4*TinyHidden*id)
		v := make([]float32, TinyHidden)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf.Bytes()[off+uint64(4*i):]))
		}
		return v
	}
	var sumEOS, sumA float64
	for i, x := range row(TinyEOS) {
		sumEOS += math.Abs(float64(x))
		sumA += math.Abs(float64(row('a')[i]))
	}
	if out.name != "output.weight" || sumEOS != 0 || sumA == 0 {
		t.Errorf("%s: |EOS row| = %v, |'a' row| = %v; want 0 and > 0", out.name, sumEOS, sumA)
	}
}

// TestTinyLlamaSeeded: one seed writes one file, byte for byte; another
// seed writes another.
func TestTinyLlamaSeeded(t *testing.T) {
	write := func(seed uint64) []byte {
		var b bytes.Buffer
		if err := Write(&b, TinyLlama(seed)); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b, c := write(7), write(7), write(8)
	if !bytes.Equal(a, b) {
		t.Error("two models of seed 7 differ")
	}
	if bytes.Equal(a, c) {
		t.Error("the models of seeds 7 and 8 are the same")
	}
	if len(a) < 5_500_000 || len(a) > 6_200_000 {
		t.Errorf("%d bytes, want about 5.8 MB", len(a))
	}
}

func TestWriteRejects(t *testing.T) {
	for _, tt := range []struct {
		name string
		m    Model
	}{
		{"value type", Model{Metadata: []KV{{"k", 1.5}}}},
		{"short data", Model{Tensors: []Tensor{{Name: "t", Dims: []uint64{2, 2}, Data: make([]float32, 3)}}}},
		{"no dims", Model{Tensors: []Tensor{{Name: "t"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, tt.m); !errors.Is(err, ErrInvalid) || b.Len() != 0 {
				t.Errorf("Write: %v, %d bytes written; want ErrInvalid and nothing", err, b.Len())
			}
		})
	}
}
