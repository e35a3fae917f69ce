//go:build cgo && linux

package nvmlsource

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/otelenergy/otelenergy/internal/source"
)

// ProcessReader lists the compute processes on a [Source]'s boards with
// their SM utilization since its own previous read of each board, for one
// consumer: it keeps its own lastSeenTimeStamp per board, so it never
// takes samples from the Source's share listing or from another reader.
// Create one with [Source.NewProcessReader]. A ProcessReader is not safe
// for concurrent use; its NVML calls serialize with the Source's as
// ReadEnergy's do, one call at a time.
type ProcessReader struct {
	s *Source
	// cursors[i] is this reader's position in board i's samples.
	cursors []SampleCursor
	// mig holds each board's MIG devices as of the latest read.
	mig [][]migDevice
	// weigh: under MIG, weigh each instance by its compute slices and
	// its GPM activity, and list past an instance whose listing fails.
	// The Source's share listing, which needs a complete listing or none,
	// reads without.
	weigh bool
	// gpm is, per board, whether GPM was found supported (0 unknown, 1
	// yes, 2 no, 3 and above a failed query's countdown to its retry);
	// mg is GpmMetricsGet's argument, kept to be reused.
	gpm []uint8
	mg  nvml.GpmMetricsGetType
}

// NewProcessReader returns a reader of the Source's boards' processes.
func (s *Source) NewProcessReader() *ProcessReader {
	return &ProcessReader{
		s:       s,
		cursors: make([]SampleCursor, len(s.devices)),
		mig:     make([][]migDevice, len(s.devices)),
		gpm:     make([]uint8, len(s.devices)),
		weigh:   true,
	}
}

// Read lists Devices()[i]'s compute processes into b, which it resets
// first, and their SM utilization over the samples this reader has not
// taken before (GetProcessUtilization with the newest timestamp it took).
// Samples at or before that timestamp, which NVML can return when a pid's
// samples are seconds stale, are not counted twice. After the wall clock
// steps back, the query is lowered so that the samples stamped on the new
// timeline come back, and the old timeline's, still in the driver's
// buffer, are told apart by the record of those taken (see
// [SampleCursor]). The first read of a board takes the driver's whole
// buffer.
//
// Under MIG the processes are listed per MIG device (the parent handle
// lists them only to a privileged caller), each with its Instance and its
// Weight (see [Instance]), and Utilization is UtilUnsupported, as it is
// on a board that answers GetProcessUtilization with anything but SUCCESS
// or NOT_FOUND. A MIG device whose listing fails does not fail the read:
// its weight is added to UnlistedWeight, its error counted in
// InstanceErrors and the first one kept in InstanceErr.
//
// Errors: an i outside Devices() yields a plain error; a board NVML
// reports lost yields an error wrapping [source.ErrDeviceLost], and marks
// it lost for ReadEnergy too; a failed listing wraps [source.ErrRead];
// after Close, [source.ErrUnavailable]. On error b holds what was listed
// before the failure and must not be used as a complete listing.
//
// A read makes GetComputeRunningProcesses, GetMPSComputeRunningProcesses,
// GetMigMode and GetProcessUtilization calls; under MIG, per MIG device,
// GetComputeRunningProcesses instead. With go-nvml's mock, a read of a
// board without MIG allocates nothing once b has grown.
func (r *ProcessReader) Read(i int, b *BoardProcesses) error {
	s := r.s
	if i < 0 || i >= len(s.devices) {
		return fmt.Errorf("nvmlsource: device index %d out of range [0, %d)", i, len(s.devices))
	}
	b.Reset()
	h := s.handles[i]
	var (
		mode int
		ret  nvml.Return
	)
	if err := r.call(i, "GetMigMode", func() nvml.Return {
		mode, _, ret = h.GetMigMode()
		if ret == nvml.ERROR_GPU_IS_LOST {
			return ret
		}
		if ret != nvml.SUCCESS {
			// Boards without MIG answer NOT_SUPPORTED; like the share
			// listing, any answer but MIG enabled lists the board whole.
			mode = nvml.DEVICE_MIG_DISABLE
		}
		return nvml.SUCCESS
	}); err != nil {
		return err
	}
	if mode == nvml.DEVICE_MIG_ENABLE {
		b.MIG, b.Utilization = true, UtilUnsupported
		return r.readMIG(i, b)
	}
	var procs, mps []nvml.ProcessInfo
	if err := r.call(i, "GetComputeRunningProcesses", func() nvml.Return {
		procs, ret = h.GetComputeRunningProcesses()
		return ret
	}); err != nil {
		return err
	}
	if err := r.call(i, "GetMPSComputeRunningProcesses", func() nvml.Return {
		mps, ret = h.GetMPSComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			// Drivers without MPS listing: the plain list is all there is.
			mps = nil
		}
		return nvml.SUCCESS
	}); err != nil {
		return err
	}
	b.list(procs, "")
	b.list(mps, "")

	var samples []nvml.ProcessUtilizationSample
	cur := &r.cursors[i]
	last := cur.Since(s.clock())
	var uret nvml.Return
	if err := r.call(i, "GetProcessUtilization", func() nvml.Return {
		samples, uret = h.GetProcessUtilization(last)
		if uret == nvml.ERROR_GPU_IS_LOST {
			return uret
		}
		return nvml.SUCCESS
	}); err != nil {
		return err
	}
	switch uret {
	case nvml.SUCCESS, nvml.ERROR_NOT_FOUND:
		// NOT_FOUND: no sample newer than last.
		for _, smp := range samples {
			if !cur.Take(smp.Pid, smp.TimeStamp) {
				continue
			}
			p := b.find(smp.Pid)
			if p == nil {
				b.Processes = append(b.Processes, ProcessUsage{Pid: smp.Pid})
				p = &b.Processes[len(b.Processes)-1]
			}
			p.SmUtil += uint64(smp.SmUtil)
			p.Samples++
			b.Samples = append(b.Samples, Sample{Pid: smp.Pid, TimeStamp: smp.TimeStamp,
				SmUtil: smp.SmUtil, MemUtil: smp.MemUtil, EncUtil: smp.EncUtil, DecUtil: smp.DecUtil})
		}
	default:
		// vGPU and some boards have no per-process utilization.
		b.Utilization = UtilUnsupported
	}
	return nil
}

// list adds each pid of procs not yet in b.
func (b *BoardProcesses) list(procs []nvml.ProcessInfo, instance string) {
	for _, p := range procs {
		if b.find(p.Pid) == nil {
			b.Processes = append(b.Processes, ProcessUsage{Pid: p.Pid, Listed: true, Instance: instance})
		}
	}
}

func (b *BoardProcesses) find(pid uint32) *ProcessUsage {
	for k := range b.Processes {
		if b.Processes[k].Pid == pid {
			return &b.Processes[k]
		}
	}
	return nil
}

// call runs f, one NVML call on board i, under Source.mu's read side (so
// energy reads never wait for it), and turns its
// return code into this package's errors. GPU_IS_LOST marks the board lost
// for every later call, ReadEnergy's included.
func (r *ProcessReader) call(i int, op string, f func() nvml.Return) error {
	s := r.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%w: NVML source closed", source.ErrUnavailable)
	}
	if err := s.lost[i].Load(); err != nil {
		return *err
	}
	switch ret := f(); ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_GPU_IS_LOST:
		err := fmt.Errorf("%w: GPU %d %s: %w", source.ErrDeviceLost, i, s.devices[i].ID, &returnError{op: op, ret: ret})
		s.lost[i].CompareAndSwap(nil, &err)
		return *s.lost[i].Load()
	default:
		return fmt.Errorf("%w: listing processes on GPU %d %s: %w", source.ErrRead, i, s.devices[i].ID, &returnError{op: op, ret: ret})
	}
}
