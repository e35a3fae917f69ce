package nvmlsource

import (
	"time"

	"github.com/otelenergy/otelenergy/internal/proctree"
	"github.com/otelenergy/otelenergy/internal/source"
)

const (
	// kind is what [Source.Kind] returns.
	kind = "nvml"
	// vendor is the hw.vendor of every device this package reports.
	vendor = "NVIDIA"
	// powerMargin scales the most a GPU's power limit can be set to into
	// its [source.Device.MaxWatts]. Boards overshoot their limit for
	// milliseconds, and a counter step can lump two update periods
	// together, so the bound sits well above the limit while staying
	// orders of magnitude below what a corrupt reading implies.
	powerMargin = 1.5
	// defaultShareInterval is how often a [Source] lists the processes on
	// its GPUs. Processes come and go on the scale of seconds to hours;
	// listing costs a few NVML calls per GPU.
	defaultShareInterval = 5 * time.Second
)

// Option configures [New]. The interface is sealed: only this package
// implements it.
type Option interface {
	apply(*config)
}

// optionFunc adapts a function to [Option].
type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// Skipped is a GPU that [New] found but does not meter, and why. It is the
// same type as [source.Skipped], so that the public package re-exports one
// type for every source.
type Skipped = source.Skipped

// WithDevices names the GPUs to meter, overriding CUDA_VISIBLE_DEVICES and
// NVIDIA_VISIBLE_DEVICES. Each id is an NVML index ("2"), a GPU UUID
// ("GPU-8a4b..."), a unique prefix of one with or without "GPU-", or a MIG
// UUID ("MIG-..."), which names the board it is carved from. Unlike
// CUDA_VISIBLE_DEVICES, ids of different forms mix, an index is all digits,
// and duplicates, including several MIG instances of one board, meter the
// board once.
//
// An id that names no GPU makes [New] fail with an error wrapping
// [source.ErrNotVisible] that names the id and lists the GPUs NVML shows.
// The default, also used when ids is empty, is the environment's choice;
// see the package doc.
func WithDevices(ids ...string) Option {
	return optionFunc(func(c *config) { c.devices = append([]string(nil), ids...) })
}

// WithProcesses names the processes whose work the energy is attributed
// to, replacing the default, which is this process alone (os.Getpid()). A
// gateway names the inference server it fronts. The pids are as NVML
// reports them, which is the host's numbering, and are compared with NVML's
// wherever this process runs, in a container with a PID namespace of its
// own too; see the package doc on containers. WithProcesses with no pid
// keeps the default.
func WithProcesses(pids ...int) Option {
	return optionFunc(func(c *config) { c.pids = append([]int(nil), pids...) })
}

// WithProcessSet adds the members of set, as they stand at each process
// listing, to the attributed processes: a server whose process tree
// changes (a runner started at its first request, restarted after an
// idle unload, workers that exit) is attributed as it is at each
// listing, from the first listing that sees a new process, and a process
// that has left the set is no longer attributed from the next one.
// [proctree.Set.AppendPIDs] is called once per listing, on the listing's
// goroutine (and once in [New]), never on ReadEnergy's or Share's path.
// Like those of [WithProcesses], its pids are compared with NVML's as
// host pids, and their descendants are attributed too where this process
// runs in the host PID namespace. With a set, the default of this
// process alone no longer applies: an empty set attributes only the pids
// of WithProcesses. The default is no set.
func WithProcessSet(set proctree.Set) Option {
	return optionFunc(func(c *config) { c.set = set })
}
