package proctree

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// FuzzListening checks appendListening against a plain reading of the
// net/tcp format: split into lines, the header dropped, fields split on
// runs of white space; a line listens on port when its fourth field is 0A and
// its local address ends in the port in hexadecimal, and it counts when
// its inode, the tenth field, is a number other than 0, each inode once.
func FuzzListening(f *testing.F) {
	f.Add(readTestdata(f, "net/tcp"), 11434)
	f.Add(readTestdata(f, "net/tcp6"), 11434)
	f.Add("h\n 0: 0100007F:1F90 0:0 0A a b c 0 0 7\n 1: :1F90 x 0A a b c 0 0 7\n", 8080)
	f.Fuzz(func(t *testing.T, text string, port int) {
		got, err := appendListening(nil, strings.NewReader(text), port)
		if err != nil {
			return // a line longer than the scanner's buffer: no reference
		}
		var want []uint64
		lines := strings.Split(text, "\n")
		for _, line := range lines[1:] {
			fields := strings.FieldsFunc(line, unicode.IsSpace)
			if len(fields) < 10 || fields[3] != "0A" {
				continue
			}
			addr := fields[1]
			p, err := strconv.ParseUint(addr[strings.LastIndex(addr, ":")+1:], 16, 16)
			if err != nil || int(p) != port {
				continue
			}
			if ino, err := strconv.ParseUint(fields[9], 10, 64); err == nil && ino != 0 && !slices.Contains(want, ino) {
				want = append(want, ino)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("appendListening(%q, %d) = %v, want %v", text, port, got, want)
		}
	})
}

func readTestdata(f *testing.F, name string) string {
	b, err := os.ReadFile(fakeProc(f).path(name))
	if err != nil {
		f.Fatal(err)
	}
	return string(b)
}
