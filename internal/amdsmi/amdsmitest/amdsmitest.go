// Package amdsmitest fakes AMD SMI behind [amdsmi.Lib], in the style of
// go-nvml's mocks: [Mock] has one function field per method, and [Node] is
// a ready-made fake server whose boards draw power on a clock the test
// advances, with the anomalies real boards show (a wrap, a reset, a lost
// board, a counter that is not supported, an old library).
package amdsmitest

import (
	"fmt"
	"math"
	"sync"

	"github.com/otelenergy/otelenergy/internal/amdsmi"
)

// Mock implements [amdsmi.Lib] by calling its function fields. A method
// whose field is nil panics, as go-nvml's moq mocks do.
type Mock struct {
	InitFunc        func() amdsmi.Status
	ShutDownFunc    func() amdsmi.Status
	LibVersionFunc  func() (amdsmi.Version, amdsmi.Status)
	SocketsFunc     func() ([]amdsmi.Handle, amdsmi.Status)
	ProcessorsFunc  func(amdsmi.Handle) ([]amdsmi.Handle, amdsmi.Status)
	UUIDFunc        func(amdsmi.Handle) (string, amdsmi.Status)
	MarketNameFunc  func(amdsmi.Handle) (string, amdsmi.Status)
	EnergyCountFunc func(amdsmi.Handle) (uint64, float32, uint64, amdsmi.Status)
	PowerWattsFunc  func(amdsmi.Handle) (float64, amdsmi.Status)
	ProcessesFunc   func(amdsmi.Handle, []amdsmi.Process) ([]amdsmi.Process, amdsmi.Status)
}

var _ amdsmi.Lib = (*Mock)(nil)

func must[F any](f *F, name string) F {
	if f == nil || any(*f) == nil {
		panic("amdsmitest: Mock." + name + " is nil")
	}
	return *f
}

func (m *Mock) Init() amdsmi.Status     { return must(&m.InitFunc, "InitFunc")() }
func (m *Mock) ShutDown() amdsmi.Status { return must(&m.ShutDownFunc, "ShutDownFunc")() }
func (m *Mock) LibVersion() (amdsmi.Version, amdsmi.Status) {
	return must(&m.LibVersionFunc, "LibVersionFunc")()
}
func (m *Mock) Sockets() ([]amdsmi.Handle, amdsmi.Status) {
	return must(&m.SocketsFunc, "SocketsFunc")()
}
func (m *Mock) Processors(s amdsmi.Handle) ([]amdsmi.Handle, amdsmi.Status) {
	return must(&m.ProcessorsFunc, "ProcessorsFunc")(s)
}
func (m *Mock) UUID(h amdsmi.Handle) (string, amdsmi.Status) { return must(&m.UUIDFunc, "UUIDFunc")(h) }
func (m *Mock) MarketName(h amdsmi.Handle) (string, amdsmi.Status) {
	return must(&m.MarketNameFunc, "MarketNameFunc")(h)
}
func (m *Mock) EnergyCount(h amdsmi.Handle) (uint64, float32, uint64, amdsmi.Status) {
	return must(&m.EnergyCountFunc, "EnergyCountFunc")(h)
}
func (m *Mock) PowerWatts(h amdsmi.Handle) (float64, amdsmi.Status) {
	return must(&m.PowerWattsFunc, "PowerWattsFunc")(h)
}
func (m *Mock) Processes(h amdsmi.Handle, buf []amdsmi.Process) ([]amdsmi.Process, amdsmi.Status) {
	return must(&m.ProcessesFunc, "ProcessesFunc")(h, buf)
}

// MI300XResolution is an MI300X's counter resolution: 2^-16 J, which a
// float32 holds exactly.
const MI300XResolution = float32(15.2587890625)

// Board is one fake processor. Its fields may be changed between calls to
// [Node.Advance], under the Node's lock ([Node.Do]).
type Board struct {
	UUID, Name string
	// Socket is the index of the socket the board is listed under.
	Socket int
	// Acc is the accumulator, Res its µJ per count; Ts the counter's
	// timestamp in ns.
	Acc uint64
	Res float32
	Ts  uint64
	// Watts is what the board draws, and what PowerWatts reports unless
	// CounterScale makes the counter disagree.
	Watts float64
	// CounterScale multiplies what the counter counts (1 when 0): a
	// counter that misreads.
	CounterScale float64
	// EnergyStatus, when not success, is what EnergyCount returns
	// (NOT_SUPPORTED for a board without the counter).
	EnergyStatus amdsmi.Status
	// Lost makes every call on the board return NOT_FOUND.
	Lost bool
	// Procs is the board's process list.
	Procs []amdsmi.Process
	// TrueCounts is the counts the board has drawn since the fake began,
	// whatever its accumulator did: the ground truth.
	TrueCounts uint64
	frac       float64
}

// Node is a fake server of boards on a fake clock. Its Mock is safe for
// concurrent use.
type Node struct {
	Mock
	mu      sync.Mutex
	Boards  []*Board
	Version amdsmi.Version
}

// NewMI300X returns a node of n MI300X boards, one per socket, drawing
// 150 W to 700 W, with AMD SMI 26.1.0 (ROCm 7).
func NewMI300X(n int) *Node {
	nd := &Node{Version: amdsmi.Version{Major: 26, Minor: 1}}
	for i := range n {
		nd.Boards = append(nd.Boards, &Board{
			UUID:   fmt.Sprintf("5c%02dd1a3-0000-1000-80ee-%012x", i, 0x74a1+i),
			Name:   "AMD Instinct MI300X",
			Socket: i,
			Acc:    uint64(1e9) * uint64(i+1),
			Res:    MI300XResolution,
			Ts:     1e12,
			Watts:  150 + float64(i)*75,
		})
	}
	nd.wire()
	return nd
}

// NewMI250X returns a node of n MI250X packages with two dies each, both
// listed under the package's socket; the second die's counter never moves
// and its power reads 0, as only one die reports the package.
func NewMI250X(n int) *Node {
	nd := &Node{Version: amdsmi.Version{Major: 24, Minor: 7}}
	for i := range n {
		for die := range 2 {
			b := &Board{
				UUID:   fmt.Sprintf("mi250x-%d-gcd%d", i, die),
				Name:   "AMD Instinct MI250X",
				Socket: i,
				Res:    MI300XResolution,
				Ts:     1e12,
				Watts:  300,
			}
			if die == 1 {
				b.Watts = 0
			}
			nd.Boards = append(nd.Boards, b)
		}
	}
	nd.wire()
	return nd
}

// Do runs f under the node's lock, to change boards safely while a Source
// reads them.
func (nd *Node) Do(f func()) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	f()
}

// Advance lets d nanoseconds pass: every board that is not lost counts
// what it draws (whole counts, the remainder carried), wrapping at 2^64.
func (nd *Node) Advance(d int64) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	for _, b := range nd.Boards {
		b.Ts += uint64(d)
		if b.Lost || b.Res <= 0 {
			continue
		}
		scale := b.CounterScale
		if scale == 0 {
			scale = 1
		}
		c := b.Watts*scale*float64(d)/1e3/float64(b.Res) + b.frac
		whole := math.Floor(c)
		b.frac = c - whole
		b.Acc += uint64(whole) // wraps at 2^64, as the hardware's would
		b.TrueCounts += uint64(whole)
	}
}

func handle(i int) amdsmi.Handle { return amdsmi.Handle(i + 1) }

func (nd *Node) board(h amdsmi.Handle) (*Board, amdsmi.Status) {
	i := int(h) - 1
	if i < 0 || i >= len(nd.Boards) || int(h) > 1<<20 {
		return nil, amdsmi.StatusInval
	}
	b := nd.Boards[i]
	if b.Lost {
		return nil, amdsmi.StatusNotFound
	}
	return b, amdsmi.StatusSuccess
}

func (nd *Node) wire() {
	nd.InitFunc = func() amdsmi.Status { return amdsmi.StatusSuccess }
	nd.ShutDownFunc = func() amdsmi.Status { return amdsmi.StatusSuccess }
	nd.LibVersionFunc = func() (amdsmi.Version, amdsmi.Status) {
		nd.mu.Lock()
		defer nd.mu.Unlock()
		return nd.Version, amdsmi.StatusSuccess
	}
	nd.SocketsFunc = func() ([]amdsmi.Handle, amdsmi.Status) {
		nd.mu.Lock()
		defer nd.mu.Unlock()
		n := 0
		for _, b := range nd.Boards {
			n = max(n, b.Socket+1)
		}
		var out []amdsmi.Handle
		for i := range n {
			out = append(out, amdsmi.Handle(1<<20+i))
		}
		return out, amdsmi.StatusSuccess
	}
	nd.ProcessorsFunc = func(s amdsmi.Handle) ([]amdsmi.Handle, amdsmi.Status) {
		nd.mu.Lock()
		defer nd.mu.Unlock()
		var out []amdsmi.Handle
		for i, b := range nd.Boards {
			if amdsmi.Handle(1<<20+b.Socket) == s {
				out = append(out, handle(i))
			}
		}
		return out, amdsmi.StatusSuccess
	}
	nd.UUIDFunc = func(h amdsmi.Handle) (string, amdsmi.Status) {
		nd.mu.Lock()
		defer nd.mu.Unlock()
		b, st := nd.board(h)
		if st != amdsmi.StatusSuccess {
			return "", st
		}
		return b.UUID, st
	}
	nd.MarketNameFunc = func(h amdsmi.Handle) (string, amdsmi.Status) {
		nd.mu.Lock()
		defer nd.mu.Unlock()
		b, st := nd.board(h)
		if st != amdsmi.StatusSuccess {
			return "", st
		}
		return b.Name, st
	}
	nd.EnergyCountFunc = func(h amdsmi.Handle) (uint64, float32, uint64, amdsmi.Status) {
		nd.mu.Lock()
		defer nd.mu.Unlock()
		b, st := nd.board(h)
		if st != amdsmi.StatusSuccess {
			return 0, 0, 0, st
		}
		if b.EnergyStatus != amdsmi.StatusSuccess {
			return 0, 0, 0, b.EnergyStatus
		}
		return b.Acc, b.Res, b.Ts, amdsmi.StatusSuccess
	}
	nd.PowerWattsFunc = func(h amdsmi.Handle) (float64, amdsmi.Status) {
		nd.mu.Lock()
		defer nd.mu.Unlock()
		b, st := nd.board(h)
		if st != amdsmi.StatusSuccess {
			return 0, st
		}
		return b.Watts, st
	}
	nd.ProcessesFunc = func(h amdsmi.Handle, buf []amdsmi.Process) ([]amdsmi.Process, amdsmi.Status) {
		nd.mu.Lock()
		defer nd.mu.Unlock()
		b, st := nd.board(h)
		if st != amdsmi.StatusSuccess {
			return buf[:0], st
		}
		return append(buf[:0], b.Procs...), st
	}
}
