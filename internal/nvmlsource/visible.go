//go:build cgo && linux

package nvmlsource

import (
	"errors"
	"fmt"
	"slices"
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
		cuda, notes := r.cudaVisible(v)
		sel.notes = append(sel.notes, notes...)
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

// cudaVisible returns the boards that CUDA_VISIBLE_DEVICES=v leaves
// visible, read as the CUDA driver reads it, and the problems to report.
// The rules, and where each comes from:
//
//   - Set and empty, no GPU; an invalid index ends the list, hiding itself
//     and every entry after it; GPU UUIDs with "GPU-", abbreviated to any
//     unique prefix; MIG-<uuid>: the CUDA Programming Guide, "CUDA
//     Environment Variables", CUDA_VISIBLE_DEVICES.
//   - The first entry decides what the list is: a list of GPU UUIDs when it
//     starts with "GPU-", of MIG UUIDs when it starts with "MIG-", of
//     indices otherwise. In a UUID list, an entry of another form ends the
//     list; in an index list, a UUID is an invalid index and ends it.
//     Indices are read like C's strtoul: leading digits, the rest ignored,
//     so "1gpu2" is 1; no digits or a negative number is invalid. A UUID
//     without "GPU-" is therefore read as an index ("8a4b" is 8). An
//     index past the last GPU ends the list. A repeated index, or a UUID
//     list naming one GPU twice (or one MIG UUID twice), leaves no GPU
//     visible at all. These are the rules PyTorch reproduces in
//     torch.cuda._parse_visible_devices and _transform_uuid_to_ordinals
//     (pytorch/pytorch PRs 84879 and 92315, the latter tested against the
//     525.60.13 driver); NVIDIA documents none of them.
//
// Spaces around entries are ignored and prefixes match in any case; what
// CUDA does with either in a UUID list is not documented.
func (r *resolver) cudaVisible(v string) ([]bool, []error) {
	visible := make([]bool, len(r.boards))
	entries := strings.Split(v, ",")
	var notes []error
	hidden := func(e, why string) {
		if v != "" {
			notes = append(notes, fmt.Errorf("%s=%q: entry %q %s, so it and every entry after it are hidden, as CUDA hides them",
				envCUDA, v, e, why))
		}
	}
	none := func(why string) ([]bool, []error) {
		return make([]bool, len(r.boards)), []error{fmt.Errorf("%s=%q %s, and CUDA then shows no GPU", envCUDA, v, why)}
	}

	first := strings.TrimSpace(entries[0])
	if kind := first[:min(len(first), 4)]; strings.EqualFold(kind, "GPU-") || strings.EqualFold(kind, "MIG-") {
		var seen []int
		var migs []string
		for _, e := range entries {
			e = strings.TrimSpace(e)
			if !hasPrefixFold(e, kind) {
				hidden(e, "is not a "+kind+" UUID in a list of them")
				break
			}
			i, ok := r.resolve(e)
			if !ok {
				hidden(e, "matches no GPU, or more than one")
				break
			}
			if strings.EqualFold(kind, "GPU-") && slices.Contains(seen, i) {
				return none(fmt.Sprintf("names GPU %d twice", i))
			}
			if strings.EqualFold(kind, "MIG-") && slices.ContainsFunc(migs, func(m string) bool { return strings.EqualFold(m, e) }) {
				return none(fmt.Sprintf("names %s twice", e))
			}
			seen, migs = append(seen, i), append(migs, e)
			visible[i] = true
		}
		return visible, notes
	}

	var indices []uint64
	for _, e := range entries {
		e = strings.TrimSpace(e)
		n, rest, ok := strtoul(e)
		if !ok {
			hidden(e, "is not an index")
			break
		}
		if slices.Contains(indices, n) {
			return none(fmt.Sprintf("repeats index %d", n))
		}
		if rest != "" {
			notes = append(notes, fmt.Errorf("%s=%q: entry %q is read as index %d, as CUDA reads it", envCUDA, v, e, n))
		}
		indices = append(indices, n)
	}
	for _, n := range indices {
		if n >= uint64(len(r.boards)) {
			hidden(strconv.FormatUint(n, 10), "is past the last GPU")
			break
		}
		visible[n] = true
	}
	return visible, notes
}

// strtoul reads s as C's strtoul reads a base-10 number: an optional sign,
// then digits, the rest returned unread. ok is false when s has no digits
// or is negative. A number too large for uint64 saturates.
func strtoul(s string) (n uint64, rest string, ok bool) {
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	digits := 0
	for digits < len(s) && s[digits] >= '0' && s[digits] <= '9' {
		d := uint64(s[digits] - '0')
		if n > (^uint64(0)-d)/10 {
			n = ^uint64(0)
		} else {
			n = n*10 + d
		}
		digits++
	}
	if digits == 0 || neg && n != 0 {
		return 0, s, false
	}
	return n, s[digits:], true
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
