package sysfscounter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/otelenergy/otelenergy/internal/source"
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

// ErrClosed reports a read of a [Set] after its Close.
var ErrClosed = errors.New("sysfscounter: closed")

// Set is a source's counters: each one's File and Extender, read under one
// lock so that a wrap is extended in the order the readings were taken, and
// closed together. Name is the source's, for its errors ("rapl"). The
// zero Set with Name set is empty and ready to use; a Set must not be
// copied after first use.
type Set struct {
	Name string

	mu     sync.Mutex
	files  []*File
	ext    []Extender
	ids    []string
	closed bool
}

// Add adds the counter of device id, which wraps after max µJ (0: it does
// not wrap, or its range is unknown), at the next index. Call it before
// the Set is shared.
func (s *Set) Add(f *File, max uint64, id string) {
	s.files = append(s.files, f)
	s.ext = append(s.ext, Extender{Max: max})
	s.ids = append(s.ids, id)
}

// Read returns counter i's reading in µJ, extended past its wraps. It
// fails with an error wrapping [ErrClosed] after Close, and with the
// File's error otherwise. i must be an index Add gave. It allocates
// nothing on success.
func (s *Set) Read(i int) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	uj, err := s.files[i].Read()
	if err != nil {
		return 0, err
	}
	return s.ext[i].Extend(uj), nil
}

// ReadEnergy is a source's ReadEnergy over the Set: counter i in
// millijoules, rounded down, extended past its wraps. An index out of
// range or a failed read wraps [source.ErrRead]; a read after Close,
// [source.ErrUnavailable]. It allocates nothing on success.
func (s *Set) ReadEnergy(i int) (uint64, error) {
	if i < 0 || i >= len(s.files) {
		return 0, fmt.Errorf("%w: %s: device index %d out of range [0, %d)", source.ErrRead, s.Name, i, len(s.files))
	}
	uj, err := s.Read(i)
	if errors.Is(err, ErrClosed) {
		return 0, fmt.Errorf("%w: %s source closed", source.ErrUnavailable, s.Name)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %s %s: %w", source.ErrRead, s.Name, s.ids[i], err)
	}
	return uj / 1000, nil
}

// Wraps returns how many wraps counter i has made while read.
func (s *Set) Wraps(i int) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ext[i].Wraps()
}

// Close closes every counter; later reads fail with [ErrClosed]. It is
// idempotent.
func (s *Set) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
