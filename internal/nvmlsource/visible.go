//go:build cgo && linux

package nvmlsource

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/otelenergy/otelenergy/internal/source"
)

// Environment variables that choose GPUs.
const (
	envCUDA   = "CUDA_VISIBLE_DEVICES"
	envNVIDIA = "NVIDIA_VISIBLE_DEVICES"
)

// board is what New learns of a GPU before it decides whether to meter it.
type board struct {
	handle nvml.Device
	uuid   string
	// err is why the handle or the UUID could not be read, or nil. Such a
	// board cannot be matched by UUID.
	err error
}

// selection is the outcome of choosing boards.
type selection struct {
	// meter[i] reports whether board i is chosen.
	meter []bool
	// why explains, for a board left out, which rule hid it.
	why string
	// notes are problems to report once when New succeeds: an invalid
	// CUDA_VISIBLE_DEVICES entry, an NVIDIA_VISIBLE_DEVICES UUID that
	// matches no GPU.
	notes []error
}

// resolver matches device ids against the boards NVML shows.
type resolver struct {
	lib    nvml.Interface
	boards []board
	// migs maps each MIG device UUID to its board's index. It is built on
	// the first MIG id, so that layouts without one make no MIG call.
	migs map[string]int
}

// resolve returns the index of the board id names, as CUDA would read id
// in CUDA_VISIBLE_DEVICES: a decimal index, a GPU UUID or a unique prefix
// of one with or without "GPU-", or a MIG UUID, which names its board.
func (r *resolver) resolve(id string) (int, bool) {
	id = strings.TrimSpace(id)
	if id == "" {
		return 0, false
	}
	if isIndex(id) {
		n, err := strconv.Atoi(id)
		return n, err == nil && n < len(r.boards)
	}
	if rest, ok := cutPrefixFold(id, "MIG-"); ok {
		// The legacy form MIG-GPU-<uuid>/<gi>/<ci> names its board.
		if parent, _, ok := strings.Cut(rest, "/"); ok && hasPrefixFold(parent, "GPU-") {
			return r.matchGPU(parent, true)
		}
		return r.matchMIG(id)
	}
	if !hasPrefixFold(id, "GPU-") {
		id = "GPU-" + id
	}
	return r.matchGPU(id, false)
}

// matchGPU returns the one board whose UUID is uuid, or, unless exact,
// starts with it.
func (r *resolver) matchGPU(uuid string, exact bool) (int, bool) {
	found, n := -1, 0
	for i, b := range r.boards {
		if b.err != nil {
			continue
		}
		if exact && strings.EqualFold(b.uuid, uuid) || !exact && hasPrefixFold(b.uuid, uuid) {
			found, n = i, n+1
		}
	}
	return found, n == 1
}

// matchMIG returns the board of the one MIG device whose UUID is, or starts
// with, uuid.
func (r *resolver) matchMIG(uuid string) (int, bool) {
	if r.migs == nil {
		r.migs = migDevices(r.lib, r.boards)
	}
	found, n := -1, 0
	for mig, i := range r.migs {
		if strings.EqualFold(mig, uuid) {
			return i, true
		}
		if hasPrefixFold(mig, uuid) {
			found, n = i, n+1
		}
	}
	return found, n == 1
}

// migDevices maps the UUID of every MIG device NVML shows to the index of
// its board. A board whose MIG mode cannot be read is taken as having none.
func migDevices(lib nvml.Interface, boards []board) map[string]int {
	migs := make(map[string]int)
	for i, b := range boards {
		if b.err != nil {
			continue
		}
		if mode, _, ret := b.handle.GetMigMode(); ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
			continue
		}
		n, ret := b.handle.GetMaxMigDeviceCount()
		if ret != nvml.SUCCESS {
			continue
		}
		for j := range n {
			// Slots without an instance answer NOT_FOUND.
			h, ret := b.handle.GetMigDeviceHandleByIndex(j)
			if ret != nvml.SUCCESS {
				continue
			}
			if uuid, ret := h.GetUUID(); ret == nvml.SUCCESS {
				migs[uuid] = i
			}
		}
	}
	return migs
}

// choose applies the rules of the package doc: explicit ids if any, else
// CUDA_VISIBLE_DEVICES intersected with the UUIDs of
// NVIDIA_VISIBLE_DEVICES. An explicit id that matches no board is an error
// wrapping source.ErrNotVisible.
func choose(r *resolver, ids []string, lookupEnv func(string) (string, bool)) (selection, error) {
	sel := selection{meter: make([]bool, len(r.boards))}
	if len(ids) > 0 {
		for _, id := range ids {
			i, ok := r.resolve(id)
			if !ok {
				return sel, fmt.Errorf("%w: WithDevices id %q matches no GPU; NVML shows %s",
					source.ErrNotVisible, id, r.list())
			}
			sel.meter[i] = true
		}
		sel.why = fmt.Sprintf("not among WithDevices %q", ids)
		return sel, nil
	}

	for i := range sel.meter {
		sel.meter[i] = true
	}
	var whys []string
	if v, ok := lookupEnv(envCUDA); ok {
		cuda := make([]bool, len(r.boards))
		for _, e := range strings.Split(v, ",") {
			i, ok := r.resolve(e)
			if !ok {
				// CUDA hides an invalid entry and every entry after it.
				if v != "" {
					sel.notes = append(sel.notes, fmt.Errorf("%s=%q: entry %q matches no GPU, so it and every entry after it are hidden, as CUDA hides them",
						envCUDA, v, strings.TrimSpace(e)))
				}
				break
			}
			cuda[i] = true
		}
		for i := range sel.meter {
			sel.meter[i] = sel.meter[i] && cuda[i]
		}
		whys = append(whys, fmt.Sprintf("%s=%q", envCUDA, v))
	}
	if v, ok := lookupEnv(envNVIDIA); ok && uuidList(v) {
		nv := make([]bool, len(r.boards))
		matched := false
		var unmatched []string
		for _, e := range strings.Split(v, ",") {
			i, ok := r.resolve(e)
			if !ok {
				unmatched = append(unmatched, strings.TrimSpace(e))
				continue
			}
			nv[i], matched = true, true
		}
		switch {
		case !matched:
			// The variable does not describe the GPUs this NVML shows,
			// so it cannot narrow them.
			sel.notes = append(sel.notes, fmt.Errorf("%s=%q matches no GPU and is ignored; NVML shows %s", envNVIDIA, v, r.list()))
		default:
			if len(unmatched) > 0 {
				sel.notes = append(sel.notes, fmt.Errorf("%s=%q: %q match no GPU; NVML shows %s", envNVIDIA, v, unmatched, r.list()))
			}
			for i := range sel.meter {
				sel.meter[i] = sel.meter[i] && nv[i]
			}
			whys = append(whys, fmt.Sprintf("%s=%q", envNVIDIA, v))
		}
	}
	sel.why = "hidden by " + strings.Join(whys, " and ")
	return sel, nil
}

// uuidList reports whether v lists only GPU and MIG UUIDs. Indices in
// NVIDIA_VISIBLE_DEVICES are the host's and mean nothing to NVML inside the
// container, and "all", "none" and "void" restrict nothing NVML shows.
func uuidList(v string) bool {
	if strings.TrimSpace(v) == "" {
		return false
	}
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if !hasPrefixFold(e, "GPU-") && !hasPrefixFold(e, "MIG-") {
			return false
		}
	}
	return true
}

// list names the boards for an error message: "0 GPU-..., 1 GPU-...".
func (r *resolver) list() string {
	if len(r.boards) == 0 {
		return "no GPU"
	}
	var b strings.Builder
	for i, bd := range r.boards {
		if i > 0 {
			b.WriteString(", ")
		}
		id := bd.uuid
		if bd.err != nil {
			id = "(UUID unreadable)"
		}
		fmt.Fprintf(&b, "%d %s", i, id)
	}
	return b.String()
}

// noneChosen explains an empty selection, for New's ErrNoDevices error.
func (r *resolver) noneChosen(sel selection) error {
	err := fmt.Errorf("%w: %w: %s leaves no GPU; NVML shows %s",
		source.ErrNoDevices, source.ErrNotVisible, strings.TrimPrefix(sel.why, "hidden by "), r.list())
	return errors.Join(append([]error{err}, sel.notes...)...)
}

func isIndex(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if hasPrefixFold(s, prefix) {
		return s[len(prefix):], true
	}
	return s, false
}
