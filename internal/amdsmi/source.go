package amdsmi

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otelenergy/otelenergy/internal/periodic"
	"github.com/otelenergy/otelenergy/internal/proctree"
	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/tracker"
)

// Kind is what [Source.Kind] returns.
const Kind = "amdsmi"

const vendor = "AMD"

// Sentinel errors of this package; each is also wrapped with the
// [source] sentinel that says what it means to the sampler.
var (
	// ErrOldROCm: the AMD SMI library predates ROCm 6.3 ([MinVersion]),
	// whose energy counter is wrong on some boards. Wrapped with
	// source.ErrUnavailable.
	ErrOldROCm = errors.New("amdsmi: AMD SMI older than ROCm 6.3")
	// ErrImplausible: a board's counter disagrees with its power by more
	// than a factor of 10 at start. Wrapped with source.ErrNotSupported.
	ErrImplausible = errors.New("amdsmi: energy counter disagrees with power")
	// ErrSamePackage: a processor whose package is already metered
	// through another (the second die of an MI250, a partition of an
	// MI300X). Wrapped with source.ErrNotVisible.
	ErrSamePackage = errors.New("amdsmi: package metered through another processor")
)

const (
	// checkWindow is how long the start check lets each counter run.
	checkWindow = 500 * time.Millisecond
	// checkRatio bounds the counter's power against the driver's, both
	// ways, as Zeus's check does: loose enough for an average power that
	// lags the counter, tight enough to catch a wrong unit or a stuck
	// counter.
	checkRatio = 10
	// defaultShareInterval is how often the processes are listed.
	defaultShareInterval = 5 * time.Second
)

// Option configures [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	lib           Lib
	pids          []int
	explicitPIDs  bool
	procRoot      string
	hostPIDs      func() bool
	sleep         func(time.Duration)
	shareInterval time.Duration
}

// WithLib makes [New] use l instead of loading libamd_smi.so; tests pass
// package amdsmitest's fake.
func WithLib(l Lib) Option { return optionFunc(func(c *config) { c.lib = l }) }

// WithProcesses names the processes whose work is attributed, by host pid,
// replacing the default, this process. Where this process sees the host's
// pids, their descendants within 8 generations are attributed too.
func WithProcesses(pids ...int) Option {
	return optionFunc(func(c *config) { c.pids = slices.Clone(pids) })
}

// WithSleep replaces time.Sleep in the start check, which lets each
// counter run for 0.5 s: a simulated node advances its clock instead. The
// default is time.Sleep.
func WithSleep(f func(time.Duration)) Option { return optionFunc(func(c *config) { c.sleep = f }) }

// withProcTree sets where the process tree is read and whether this
// process sees the host's pids; tests use a fake /proc.
func withProcTree(root string, host bool) Option {
	return optionFunc(func(c *config) { c.procRoot, c.hostPIDs = root, func() bool { return host } })
}

// withShareInterval sets the listing period; zero or less starts no
// goroutine, and shares change only on refreshShares.
func withShareInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.shareInterval = d })
}

// Source reads AMD Instinct boards' energy counters through AMD SMI. Create
// one with [New]. ReadEnergy is called by one goroutine (the sampler);
// every method is safe for concurrent use, and no call reaches the library
// during or after Close's amdsmi_shut_down.
type Source struct {
	lib     Lib
	devices []source.Device
	handles []Handle
	skipped []source.Skipped

	// mu is held for reading across every library call after New, and
	// for writing by Close around amdsmi_shut_down.
	mu     sync.RWMutex
	closed bool
	// st is the sampler's state per device; sampler-only.
	st   []counter
	lost []atomic.Bool

	shares []atomicShare
	// pids are the attributed processes; walkable says whether /proc
	// numbers processes as AMD SMI does, so that their descendants can be
	// found; comparable whether pids compare with AMD SMI's at all.
	pids                 []uint32
	walkable, comparable bool
	tree                 proctree.Tree // listing-only
	// listing relists the boards every interval until Close; it is set
	// before the listing starts and never after.
	listing *periodic.Loop
	// prevGfx is the listing's previous gfx time per board and pid;
	// listing-only.
	prevGfx []map[uint32]uint64
	procBuf []Process
}

// atomicShare holds a board's latest share.
type atomicShare = atomic.Pointer[source.Share]

var (
	_ source.Source  = (*Source)(nil)
	_ source.Skipper = (*Source)(nil)
	_ source.Sharer  = (*Source)(nil)
)

// counter extends one board's accumulator past a 64-bit wrap, by package
// tracker's rule (see extend); hi counts the wraps since the accumulator
// last restarted, so that the count is hi·2^64 + the accumulator.
type counter struct {
	tr tracker.Tracker // full range, no power bound
	hi uint64
}

// extend takes accumulator reading acc and returns the wraps to add to
// it. A drop is a wrap only by the tracker's rule (the previous reading
// in the top quarter of the 64-bit range, acc in the bottom quarter);
// any other drop (a driver reload, a GPU reset) restarts the count at acc
// and is passed on as a drop, for the Monitor's tracker, which knows the
// board's power bound and the time between readings, to class as a reset
// or jitter. The tracker here has no power bound, so that no decision
// depends on when a reading is taken.
func (c *counter) extend(acc uint64) uint64 {
	st, err := c.tr.Advance(acc, 0) // no power bound: the time is not used
	switch {
	case err != nil:
		// A full-range counter is never out of range.
	case st.Kind == tracker.Wrap:
		c.hi++
	case st.Kind == tracker.Reset:
		c.hi = 0 // a restart: the count begins again from acc
	}
	return c.hi
}

// New loads AMD SMI (or uses [WithLib]), refuses a library older than ROCm
// 6.3, finds the AMD GPUs, keeps one processor per package, checks each
// counter against the board's power, and starts listing the processes on
// the boards.
//
// It fails with an error wrapping [source.ErrUnavailable] when the library
// cannot be loaded or initialized, and [ErrOldROCm] with it for an old
// library; with [source.ErrNoDevices] and each board's reason when no
// board can be metered.
func New(opts ...Option) (*Source, error) {
	c := config{sleep: time.Sleep, shareInterval: defaultShareInterval, procRoot: "/proc", hostPIDs: proctree.InHostPIDNamespace}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.lib == nil {
		l, err := Open()
		if err != nil {
			return nil, err
		}
		c.lib = l
	}
	c.explicitPIDs = len(c.pids) > 0
	if !c.explicitPIDs {
		c.pids = []int{os.Getpid()}
	}
	if st := c.lib.Init(); st != StatusSuccess {
		// Unlike NVML through go-nvml, every symbol was resolved before
		// Init, so calling ShutDown after a failed Init is safe; AMD SMI
		// documents no need for it.
		return nil, fmt.Errorf("%w: amdsmi_init: %w", source.ErrUnavailable, st)
	}
	s, err := enumerate(c)
	if err != nil {
		c.lib.ShutDown()
		return nil, err
	}
	s.startSharing(c)
	return s, nil
}

func enumerate(c config) (*Source, error) {
	lib := c.lib
	v, st := lib.LibVersion()
	if st != StatusSuccess {
		return nil, fmt.Errorf("%w: amdsmi_get_lib_version: %w", source.ErrUnavailable, st)
	}
	if v.Less(MinVersion) {
		return nil, fmt.Errorf("%w: %w: library %s; its energy counter is wrong on some boards: install ROCm 6.3 (AMD SMI %s) or newer",
			source.ErrUnavailable, ErrOldROCm, v, MinVersion)
	}
	sockets, st := lib.Sockets()
	if st != StatusSuccess {
		return nil, fmt.Errorf("%w: amdsmi_get_socket_handles: %w", source.ErrUnavailable, st)
	}
	s := &Source{lib: lib}
	type cand struct {
		d          source.Device
		h          Handle
		acc0, ts0  uint64
		res        float32
		power      float64
		powerKnown bool
	}
	var cands []cand
	index := 0
	for _, sock := range sockets {
		procs, st := lib.Processors(sock)
		if st != StatusSuccess {
			s.skipped = append(s.skipped, source.Skipped{Device: source.Device{Vendor: vendor, Index: index, Type: "gpu"},
				Reason: fmt.Errorf("%w: amdsmi_get_processor_handles: %w", source.ErrRead, st)})
			continue
		}
		var pkg string // the ID of the socket's metered processor
		for _, h := range procs {
			d := source.Device{Vendor: vendor, Index: index, Type: "gpu"}
			index++
			if d.ID, st = lib.UUID(h); st != StatusSuccess {
				s.skip(d, source.ErrRead, "amdsmi_get_gpu_device_uuid", st)
				continue
			}
			if d.Name, st = lib.MarketName(h); st != StatusSuccess || d.Name == "" {
				d.Name = "AMD GPU"
			}
			if pkg != "" {
				s.skipped = append(s.skipped, source.Skipped{Device: d,
					Reason: fmt.Errorf("%w: %w: its package is read through %s", source.ErrNotVisible, ErrSamePackage, pkg)})
				continue
			}
			acc, res, ts, st := lib.EnergyCount(h)
			if st != StatusSuccess {
				s.skip(d, probeSentinel(st), "amdsmi_get_energy_count", st)
				continue
			}
			w, pst := lib.PowerWatts(h)
			cands = append(cands, cand{d: d, h: h, acc0: acc, ts0: ts, res: res, power: w, powerKnown: pst == StatusSuccess})
			pkg = d.ID
		}
	}
	if len(cands) > 0 {
		c.sleep(checkWindow)
	}
	for _, k := range cands {
		acc, res, ts, st := lib.EnergyCount(k.h)
		if st != StatusSuccess {
			s.skip(k.d, probeSentinel(st), "amdsmi_get_energy_count", st)
			continue
		}
		if err := check(k.acc0, acc, k.ts0, ts, res, k.power, k.powerKnown); err != nil {
			s.skipped = append(s.skipped, source.Skipped{Device: k.d, Reason: err})
			continue
		}
		s.devices = append(s.devices, k.d)
		s.handles = append(s.handles, k.h)
	}
	if len(s.devices) == 0 {
		var reasons []error
		for _, sk := range s.skipped {
			reasons = append(reasons, fmt.Errorf("%s (%s): %w", sk.Device.ID, sk.Device.Name, sk.Reason))
		}
		if len(reasons) == 0 {
			reasons = append(reasons, errors.New("AMD SMI reports no GPU"))
		}
		return nil, fmt.Errorf("%w: amdsmi: %w", source.ErrNoDevices, errors.Join(reasons...))
	}
	s.st = make([]counter, len(s.devices))
	s.lost = make([]atomic.Bool, len(s.devices))
	return s, nil
}

func (s *Source) skip(d source.Device, sentinel error, op string, st Status) {
	s.skipped = append(s.skipped, source.Skipped{Device: d, Reason: fmt.Errorf("%w: %s: %w", sentinel, op, st)})
}

// probeSentinel says what a failed probe means: no counter (a VM guest, an
// old board), a lost board, or another failure.
func probeSentinel(st Status) error {
	switch st {
	case StatusNotSupported:
		return source.ErrNotSupported
	case StatusNotFound, StatusDriverNotLoaded:
		return source.ErrDeviceLost
	}
	return source.ErrRead
}

// check compares the counter's power over the start window with the
// driver's, as Zeus does at start: the counter must move, and agree within
// checkRatio both ways when the driver's power is known and above 1 W. A
// counter that does not move in the window is the second die of an MI250,
// which reports nothing (its package's energy is read through the first
// die), or a broken counter; either way it is not metered.
func check(acc0, acc1, ts0, ts1 uint64, res float32, powerW float64, powerKnown bool) error {
	dt := float64(ts1-ts0) / 1e9
	if ts1 <= ts0 {
		dt = checkWindow.Seconds()
	}
	counterW := float64(acc1-acc0) * float64(res) / 1e6 / dt
	switch {
	case acc1 < acc0:
		return nil // restarted or wrapped during the check: nothing to compare
	case acc1 == acc0:
		return fmt.Errorf("%w: %w: the counter did not move in %v (the board draws %.0f W); the second die of an MI250 reports no energy, its package is read through the first",
			source.ErrNotSupported, ErrImplausible, checkWindow, powerW)
	case !powerKnown || powerW <= 1:
		return nil
	case counterW > powerW*checkRatio || counterW < powerW/checkRatio:
		return fmt.Errorf("%w: %w: the counter shows %.1f W where the driver reports %.1f W",
			source.ErrNotSupported, ErrImplausible, counterW, powerW)
	}
	return nil
}

// Kind returns "amdsmi".
func (s *Source) Kind() string { return Kind }

// Devices returns the metered boards, one per package, in AMD SMI's order.
func (s *Source) Devices() []source.Device { return slices.Clone(s.devices) }

// Skipped returns the processors found but not metered, with the reason
// for each.
func (s *Source) Skipped() []source.Skipped { return slices.Clone(s.skipped) }

// ReadEnergy returns Devices()[i]'s energy in millijoules since its
// counter last restarted: accumulator × resolution / 1000, computed
// exactly (see microjoulesToMJ), with 64-bit wraps of the accumulator
// unwrapped. A drop that is no wrap (a driver reload, a GPU reset) is
// passed on as a drop, which the tracker classes as a reset.
func (s *Source) ReadEnergy(i int) (uint64, error) {
	mj, _, err := s.ReadEnergyStamped(i)
	return mj, err
}

// ReadEnergyStamped is ReadEnergy with the counter's own timestamp, in ns
// on the board's clock.
func (s *Source) ReadEnergyStamped(i int) (uint64, uint64, error) {
	if i < 0 || i >= len(s.devices) {
		return 0, 0, fmt.Errorf("%w: amdsmi: device index %d out of range [0, %d)", source.ErrRead, i, len(s.devices))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, 0, fmt.Errorf("%w: amdsmi source closed", source.ErrUnavailable)
	}
	if s.lost[i].Load() {
		return 0, 0, fmt.Errorf("%w: amdsmi %s", source.ErrDeviceLost, s.devices[i].ID)
	}
	acc, res, ts, st := s.lib.EnergyCount(s.handles[i])
	if st != StatusSuccess {
		if probeSentinel(st) == source.ErrDeviceLost {
			s.lost[i].Store(true)
			return 0, 0, fmt.Errorf("%w: amdsmi %s: %w", source.ErrDeviceLost, s.devices[i].ID, st)
		}
		return 0, 0, fmt.Errorf("%w: amdsmi %s: %w", source.ErrRead, s.devices[i].ID, st)
	}
	hi := s.st[i].extend(acc)
	return MicrojoulesToMJ(hi, acc, res), ts, nil
}

// MicrojoulesToMJ returns ⌊(hi·2^64 + lo) × res / 1000⌋, the millijoules
// of a count of hi·2^64 + lo at res µJ each, exactly: res is a float32, a
// 24-bit integer times a power of two, so the product is a 128-bit integer
// shifted. It saturates at the largest uint64 and returns 0 for a
// negative, zero or non-finite res.
func MicrojoulesToMJ(hi, lo uint64, res float32) uint64 {
	if !(res > 0) || math.IsInf(float64(res), 0) {
		return 0
	}
	b := math.Float32bits(res)
	exp := int(b>>23&0xff) - 127 - 23
	mant := uint64(b & (1<<23 - 1))
	if b>>23&0xff == 0 {
		exp = -126 - 23 // subnormal
	} else {
		mant |= 1 << 23
	}
	// p = (hi·2^64 + lo) × mant, as 128 bits; hi·mant must fit in 64.
	ph, pl := bits.Mul64(lo, mant)
	hh, hl := bits.Mul64(hi, mant)
	if hh != 0 {
		return math.MaxUint64
	}
	var carry uint64
	ph, carry = bits.Add64(ph, hl, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	switch {
	case exp > 0:
		if exp >= 64 || ph>>(64-exp) != 0 {
			return math.MaxUint64
		}
		ph, pl = ph<<exp|pl>>(64-exp), pl<<exp
	case exp < 0:
		n := uint(-exp)
		if n >= 128 {
			return 0
		}
		if n >= 64 {
			ph, pl = 0, ph>>(n-64)
		} else {
			ph, pl = ph>>n, pl>>n|ph<<(64-n)
		}
	}
	if ph >= 1000 {
		return math.MaxUint64
	}
	q, _ := bits.Div64(ph, pl, 1000)
	return q
}

// Close stops the process listing, waits for it, and shuts AMD SMI down
// once. It is idempotent.
func (s *Source) Close() error {
	s.stopSharing()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if st := s.lib.ShutDown(); st != StatusSuccess {
		return fmt.Errorf("amdsmi_shut_down: %w", st)
	}
	return nil
}
