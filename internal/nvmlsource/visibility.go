//go:build cgo && linux

package nvmlsource

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/otelenergy/otelenergy/internal/source"
)

// Choice is one board NVML shows, and whether [New] would choose it.
type Choice struct {
	// Index is the board's NVML index; UUID its UUID, "" when Err says
	// why it could not be read.
	Index int
	UUID  string
	Err   error
	// Chosen reports whether ids or the environment choose the board.
	Chosen bool
}

// Visibility applies [New]'s rules for choosing boards (see the package
// doc) to lib, which the caller has initialized, without probing any
// counter: it is what a diagnosis shows of CUDA_VISIBLE_DEVICES and
// NVIDIA_VISIBLE_DEVICES. It returns every board, why those not chosen are
// not, and the problems New would report (an invalid entry). An id of ids
// that matches no board is an error wrapping [source.ErrNotVisible], as is
// an environment that leaves no board (also [source.ErrNoDevices]).
func Visibility(lib nvml.Interface, ids []string, lookupEnv func(string) (string, bool)) (choices []Choice, why string, notes []error, err error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, "", nil, fmt.Errorf("%w: %w", source.ErrUnavailable, &returnError{op: "DeviceGetCount", ret: ret})
	}
	r := &resolver{lib: lib, boards: make([]board, n)}
	for i := range r.boards {
		r.boards[i] = identify(lib, i)
	}
	sel, err := choose(r, ids, lookupEnv)
	if err != nil {
		return nil, "", nil, err
	}
	any := false
	for i, b := range r.boards {
		choices = append(choices, Choice{Index: i, UUID: b.uuid, Err: b.err, Chosen: sel.meter[i] && b.err == nil})
		any = any || sel.meter[i]
	}
	if !any && n > 0 {
		return choices, sel.why, sel.notes, r.noneChosen(sel)
	}
	return choices, sel.why, sel.notes, nil
}

// ReturnError describes a failed NVML call as this package's errors do:
// the return code's name, its number, and what it usually means.
func ReturnError(op string, ret nvml.Return) error { return &returnError{op: op, ret: ret} }
