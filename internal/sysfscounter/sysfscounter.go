package sysfscounter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrPermission reports a counter this process may not read. It is
// returned wrapped together with fs.ErrPermission.
var ErrPermission = errors.New("sysfscounter: permission denied")

// ErrFormat reports an attribute whose content is not a decimal unsigned
// integer.
var ErrFormat = errors.New("sysfscounter: not an unsigned integer")

// File is one open sysfs counter attribute. The zero value is not usable;
// create one with [Open]. A File is not safe for concurrent use: one
// goroutine reads it, and Close must not run during a Read.
type File struct {
	f    *os.File
	name string
	// buf holds one reading: a uint64 in decimal is at most 20 digits,
	// and sysfs adds a newline.
	buf [32]byte
}

// OpenFunc opens a file for reading, as os.Open does.
type OpenFunc func(name string) (*os.File, error)

// Open opens the attribute at name for reading. A refused open wraps
// [ErrPermission] and fs.ErrPermission.
func Open(name string) (*File, error) { return OpenWith(os.Open, name) }

// OpenWith is [Open] through open, which tests use to be refused as a
// non-root user is: they run as root, whom the kernel never refuses.
func OpenWith(open OpenFunc, name string) (*File, error) {
	f, err := open(name)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("%w: %w", ErrPermission, err)
		}
		return nil, err
	}
	return &File{f: f, name: name}, nil
}

// Name returns the path the File was opened with.
func (c *File) Name() string { return c.name }

// Read returns the attribute's value now. It allocates nothing on success.
func (c *File) Read() (uint64, error) {
	n, err := c.f.ReadAt(c.buf[:], 0)
	if n == 0 && err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return 0, fmt.Errorf("%w: %w", ErrPermission, err)
		}
		return 0, err
	}
	return Parse(c.buf[:n])
}

// Close closes the attribute. It is idempotent.
func (c *File) Close() error {
	if c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	return err
}

// Parse reads a decimal unsigned integer followed by optional whitespace,
// as sysfs writes it. It allocates nothing on success.
func Parse(b []byte) (uint64, error) {
	end := len(b)
	for end > 0 && (b[end-1] == '\n' || b[end-1] == ' ' || b[end-1] == '\t' || b[end-1] == 0) {
		end--
	}
	if end == 0 {
		return 0, fmt.Errorf("%w: empty", ErrFormat)
	}
	var v uint64
	for _, ch := range b[:end] {
		if ch < '0' || ch > '9' {
			return 0, fmt.Errorf("%w: %q", ErrFormat, b[:end])
		}
		d := uint64(ch - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, fmt.Errorf("%w: %q overflows uint64", ErrFormat, b[:end])
		}
		v = v*10 + d
	}
	return v, nil
}

// ReadUint reads a small attribute (max_energy_range_uj, a power limit)
// once, through open.
func ReadUint(open OpenFunc, name string) (uint64, error) {
	f, err := OpenWith(open, name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	v, err := f.Read()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// Extender unwraps a counter that runs over [0, Max] and restarts at 0.
// The zero value with Max set is ready to use. It is not safe for
// concurrent use.
type Extender struct {
	// Max is the largest value the counter takes; 0 means it never
	// wraps (the full uint64 range, which Extend passes through).
	Max uint64

	started bool
	prev    uint64
	offset  uint64 // (Max+1) per wrap seen
	wraps   uint64
}

// Extend returns raw extended past every wrap seen so far: raw plus
// (Max+1) for each wrap. A reading below the previous one is a wrap when
// the previous lay in the top quarter of [0, Max] and raw in the bottom
// quarter; otherwise raw is taken as it is and the drop is passed on. The
// sum saturates at the largest uint64, which a counter in µJ reaches after
// 584,000 years at 1 MW.
func (e *Extender) Extend(raw uint64) uint64 {
	if e.Max == 0 {
		return raw
	}
	if e.started && raw < e.prev && e.prev > e.Max-e.Max/4 && raw < e.Max/4 {
		span := e.Max + 1
		if span == 0 || e.offset > ^uint64(0)-span {
			e.offset = ^uint64(0)
		} else {
			e.offset += span
		}
		e.wraps++
	}
	e.started, e.prev = true, raw
	if e.offset > ^uint64(0)-raw {
		return ^uint64(0)
	}
	return e.offset + raw
}

// Wraps returns how many wraps Extend has seen.
func (e *Extender) Wraps() uint64 { return e.wraps }
