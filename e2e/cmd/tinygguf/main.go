// Command tinygguf writes the tiny random Llama of package gguf (2 layers,
// hidden size 256, a 512-token byte-level BPE vocabulary, F32, about
// 5.8 MB) to a GGUF file, for a real engine such as Ollama to serve
// without downloading weights. Every completion it serves runs to
// max_tokens.
//
//	go run ./cmd/tinygguf -o tiny.gguf
//
// The same -seed writes the same file. The exit status is 2 for an
// invalid flag and 1 when the file cannot be written.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/otelenergy/otelenergy/e2e/internal/gguf"
)

func main() {
	fs := flag.NewFlagSet("tinygguf", flag.ContinueOnError)
	out := fs.String("o", "", "path of the GGUF file to write (required)")
	seed := fs.Uint64("seed", 1, "seed of the weights and the merges")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "tinygguf: -o is required, and takes no arguments")
		os.Exit(2)
	}
	if err := write(*out, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "tinygguf:", err)
		os.Exit(1)
	}
}

// write writes the model beside path and renames it into place, so that
// an interrupted run never leaves a truncated model at path.
func write(path string, seed uint64) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tinygguf-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := gguf.Write(f, gguf.TinyLlama(seed)); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
