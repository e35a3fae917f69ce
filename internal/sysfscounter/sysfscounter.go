package sysfscounter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/tracker"
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

// unwrapper extends one counter that runs over [0, max] and restarts at
// 0 past the wraps that package tracker recognizes: a reading below the
// previous one is a wrap only by the tracker's rule (the previous in the
// top quarter of the range, the new one in the bottom quarter). Every
// other drop, and every rise, is passed on as it is, for the Monitor's
// tracker, which knows the device's power bound and the time between
// readings, to class as a reset, jitter or a glitch: a wrap the device
// could not have drawn is a jump of a whole range there, and a glitch,
// charged what the device plausibly drew. A reading above the range is
// the tracker's ErrOutOfRange. The tracker here has no power bound, so
// that no decision depends on when a reading is taken.
type unwrapper struct {
	tr     tracker.Tracker
	offset uint64 // (max+1) per wrap seen
	wraps  uint64
}

// extend returns raw extended past every wrap seen so far: raw plus
// (max+1) for each wrap. The sum saturates at the largest uint64, which a
// counter in µJ reaches after 584,000 years at 1 MW.
func (u *unwrapper) extend(raw uint64) (uint64, error) {
	st, err := u.tr.Advance(raw, 0) // no power bound: the time is not used
	if err != nil {
		return 0, err
	}
	if st.Kind == tracker.Wrap {
		span := u.tr.Max() + 1
		if span == 0 || u.offset > ^uint64(0)-span {
			u.offset = ^uint64(0)
		} else {
			u.offset += span
		}
		u.wraps++
	}
	if u.offset > ^uint64(0)-raw {
		return ^uint64(0), nil
	}
	return u.offset + raw, nil
}

// ErrClosed reports a read of a [Set] after its Close.
var ErrClosed = errors.New("sysfscounter: closed")

// Set is a source's counters: each one's File and unwrapper, read under
// one lock so that a wrap is extended in the order the readings were
// taken, and closed together. Name is the source's, for its errors
// ("rapl"). The zero Set with Name set is empty and ready to use; a Set
// must not be copied after first use.
type Set struct {
	Name string

	mu     sync.Mutex
	files  []*File
	ext    []unwrapper
	ids    []string
	closed bool
}

// Add adds the counter of device id, which wraps after max µJ (0: it does
// not wrap, or its range is unknown), at the next index. Call it before
// the Set is shared.
func (s *Set) Add(f *File, max uint64, id string) {
	s.files = append(s.files, f)
	s.ext = append(s.ext, unwrapper{tr: tracker.New(tracker.Limits{CounterMax: max})})
	s.ids = append(s.ids, id)
}

// Read returns counter i's reading in µJ, extended past its wraps. It
// fails with an error wrapping [ErrClosed] after Close, with one wrapping
// [ErrOutOfRange] for a reading above the counter's range (a reading no
// counter of that range can show, never a wrap), and with the File's
// error otherwise. i must be an index Add gave. It allocates nothing on
// success.
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
	v, err := s.ext[i].extend(uj)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrOutOfRange, s.files[i].name, err)
	}
	return v, nil
}

// ErrOutOfRange reports a reading above the counter's declared range
// (max_energy_range_uj): it is no wrap and no energy.
var ErrOutOfRange = errors.New("sysfscounter: reading above the counter's range")

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
	return s.ext[i].wraps
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
