// Package gguf writes GGUF v3 model files, and builds the tiny random
// Llama that the end-to-end tests serve through a real engine (Ollama):
// no model can be downloaded on the test machines, so the tests write
// their own.
//
// # Format
//
// A GGUF v3 file is, all little-endian: the magic "GGUF", the version 3
// (uint32), the tensor count and the metadata count (uint64 each), the
// metadata (key, value type, value), the tensor infos (name, dimension
// count, dimensions, type, offset into the data section), padding to the
// alignment, and the tensor data, each tensor starting at a multiple of
// the alignment (general.alignment, 32 by default). Strings are a uint64
// length and the bytes; arrays are the element type, a uint64 count and
// the elements. Only what the tiny model needs is written: unsigned and
// signed 32-bit integers, float32, bool, strings, arrays of strings and of
// int32, and F32 tensors.
//
// # Determinism
//
// [Write] writes the metadata in the order given and the tensors in the
// order given, so that a model built from one seed is the same file,
// byte for byte, on every run.
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Alignment is the alignment of the tensor data that [Write] uses, GGUF's
// default.
const Alignment = 32

// ErrInvalid reports a model that cannot be written as GGUF.
var ErrInvalid = errors.New("gguf: invalid model")

// Value types of GGUF v3 metadata.
const (
	typeUint32  = 4
	typeInt32   = 5
	typeFloat32 = 6
	typeBool    = 7
	typeString  = 8
	typeArray   = 9
)

// tensorF32 is GGML's type id of an F32 tensor.
const tensorF32 = 0

// KV is one metadata entry. Value is a uint32, int32, float32, bool,
// string, []string or []int32.
type KV struct {
	Key   string
	Value any
}

// Tensor is one F32 tensor. Dims are GGML's (ne0 first: the length of a
// row), and Data holds their product of values, row after row.
type Tensor struct {
	Name string
	Dims []uint64
	Data []float32
}

// Model is a GGUF file's content.
type Model struct {
	Metadata []KV
	Tensors  []Tensor
}

// Write writes m to w as GGUF v3. It fails with an error wrapping
// [ErrInvalid] for a value of a type it does not write or a tensor whose
// data does not fill its dimensions, before it writes anything.
func Write(w io.Writer, m Model) error {
	for _, kv := range m.Metadata {
		switch kv.Value.(type) {
		case uint32, int32, float32, bool, string, []string, []int32:
		default:
			return fmt.Errorf("%w: metadata %q has a value of type %T", ErrInvalid, kv.Key, kv.Value)
		}
	}
	for _, t := range m.Tensors {
		n := uint64(1)
		for _, d := range t.Dims {
			n *= d
		}
		if len(t.Dims) == 0 || n != uint64(len(t.Data)) {
			return fmt.Errorf("%w: tensor %q has dimensions %v and %d values", ErrInvalid, t.Name, t.Dims, len(t.Data))
		}
	}
	e := encoder{w: bufio.NewWriter(w)}
	e.bytes([]byte("GGUF"))
	e.u32(3)
	e.u64(uint64(len(m.Tensors)))
	e.u64(uint64(len(m.Metadata)))
	for _, kv := range m.Metadata {
		e.str(kv.Key)
		e.value(kv.Value)
	}
	var off uint64
	for _, t := range m.Tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(tensorF32)
		e.u64(off)
		off += pad(4 * uint64(len(t.Data)))
	}
	e.zeros(pad(e.n) - e.n)
	for _, t := range m.Tensors {
		var b [4]byte
		for _, v := range t.Data {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			e.bytes(b[:])
		}
		size := 4 * uint64(len(t.Data))
		e.zeros(pad(size) - size)
	}
	if e.err != nil {
		return e.err
	}
	return e.w.Flush()
}

// pad rounds n up to a multiple of [Alignment].
func pad(n uint64) uint64 { return (n + Alignment - 1) / Alignment * Alignment }

// encoder writes little-endian values and counts the bytes written; the
// first error sticks.
type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
}

func (e *encoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	k, err := e.w.Write(b)
	e.n += uint64(k)
	e.err = err
}

func (e *encoder) zeros(n uint64) {
	for range n {
		e.bytes([]byte{0})
	}
}

func (e *encoder) u32(v uint32) { e.bytes(binary.LittleEndian.AppendUint32(nil, v)) }
func (e *encoder) u64(v uint64) { e.bytes(binary.LittleEndian.AppendUint64(nil, v)) }

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.bytes([]byte(s))
}

// value writes a value's type and the value; Write has checked the type.
func (e *encoder) value(v any) {
	switch v := v.(type) {
	case uint32:
		e.u32(typeUint32)
		e.u32(v)
	case int32:
		e.u32(typeInt32)
		e.u32(uint32(v))
	case float32:
		e.u32(typeFloat32)
		e.u32(math.Float32bits(v))
	case bool:
		e.u32(typeBool)
		if v {
			e.bytes([]byte{1})
		} else {
			e.bytes([]byte{0})
		}
	case string:
		e.u32(typeString)
		e.str(v)
	case []string:
		e.u32(typeArray)
		e.u32(typeString)
		e.u64(uint64(len(v)))
		for _, s := range v {
			e.str(s)
		}
	case []int32:
		e.u32(typeArray)
		e.u32(typeInt32)
		e.u64(uint64(len(v)))
		for _, x := range v {
			e.u32(uint32(x))
		}
	}
}
