package sysfscounter

import (
	"errors"
	"github.com/otelenergy/otelenergy/tracker"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want uint64
		err  bool
	}{
		{name: "sysfs newline", in: "123456\n", want: 123456},
		{name: "zero", in: "0\n", want: 0},
		{name: "max", in: "18446744073709551615\n", want: math.MaxUint64},
		{name: "overflow", in: "18446744073709551616\n", err: true},
		{name: "empty", in: "\n", err: true},
		{name: "negative", in: "-1\n", err: true},
		{name: "text", in: "N/A\n", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if tt.err {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("Parse(%q) = %d, %v; want ErrFormat", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Parse(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0\n", "123\n", "18446744073709551615", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Parse([]byte(s))
		want, werr := strconv.ParseUint(trim(s), 10, 64)
		if (err == nil) != (werr == nil) || (err == nil && got != want) {
			t.Fatalf("Parse(%q) = %d, %v; strconv says %d, %v", s, got, err, want, werr)
		}
	})
}

// trim is the reference for Parse's trailing whitespace.
func trim(s string) string {
	for len(s) > 0 {
		switch s[len(s)-1] {
		case '\n', ' ', '\t', 0:
			s = s[:len(s)-1]
			continue
		}
		break
	}
	// strconv accepts a leading '+' and underscores only with base 0;
	// base 10 accepts digits only, as Parse does.
	return s
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "energy_uj")
	if err := os.WriteFile(name, []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if v, err := f.Read(); err != nil || v != 42 {
		t.Fatalf("Read = %d, %v", v, err)
	}
	// sysfs regenerates an attribute on a read at offset 0; a regular
	// file rewritten in place shows its new content the same way.
	if err := os.WriteFile(name, []byte("1234567\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := f.Read(); err != nil || v != 1234567 {
		t.Fatalf("Read after rewrite = %d, %v", v, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = f.Read() }); n != 0 {
		t.Fatalf("Read allocates %v times", n)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestOpenPermission(t *testing.T) {
	refuse := func(name string) (*os.File, error) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	_, err := OpenWith(refuse, "/sys/class/powercap/intel-rapl:0/energy_uj")
	if !errors.Is(err, ErrPermission) || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("OpenWith = %v, want ErrPermission and fs.ErrPermission", err)
	}
	if _, err := ReadUint(refuse, "x"); !errors.Is(err, ErrPermission) {
		t.Fatalf("ReadUint = %v, want ErrPermission", err)
	}
}

// FuzzUnwrap checks the tracker-driven unwrapping against a reference
// that keeps the count of wraps itself: a series of readings built from
// steps, each below a quarter of the range, wrapping at max+1, must
// extend to the sum of the steps, exactly.
func FuzzUnwrap(f *testing.F) {
	f.Add(uint64(1000), uint64(700), []byte{10, 200, 250, 90, 3})
	f.Add(uint64(262143328850), uint64(262143328000), []byte{255, 255, 1})
	f.Fuzz(func(t *testing.T, max, start uint64, steps []byte) {
		if max < 8 || max > 1<<62 {
			return
		}
		start %= max + 1
		quarter := max / 4
		u := unwrapper{tr: tracker.New(tracker.Limits{CounterMax: max})}
		if got, err := u.extend(start); err != nil || got != start {
			t.Fatalf("first extend(%d) = %d, %v", start, got, err)
		}
		raw, want := start, start
		for _, b := range steps {
			// A step below a quarter of the range: the reads are frequent
			// enough for the quarter rule to tell a wrap.
			d := uint64(b) * (quarter / 256)
			if d >= quarter {
				d = quarter - 1
			}
			want += d
			raw = (raw + d) % (max + 1)
			if got, err := u.extend(raw); err != nil || got != want {
				t.Fatalf("max %d: extend(%d) = %d, %v; want %d", max, raw, got, err, want)
			}
		}
	})
}
