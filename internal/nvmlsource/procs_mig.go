//go:build cgo && linux

package nvmlsource

import (
	"errors"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/otelenergy/otelenergy/internal/source"
)

// migDevice is one MIG device of a board, kept from one read to the next.
type migDevice struct {
	h      nvml.Device
	uuid   string
	slices uint32
	gi     int            // its GPU instance id, for GPM; -1 unknown
	prev   nvml.GpmSample // its previous GPM sample, or nil
}

// readMIG lists the processes of each MIG device of board i. With
// r.weigh it also weighs each device (compute slices, GPM activity) and
// lists past a device whose listing fails; without, it returns the first
// failure. A lost board or a closed source always fails the read.
func (r *ProcessReader) readMIG(i int, b *BoardProcesses) error {
	s := r.s
	h := s.handles[i]
	var (
		n   int
		ret nvml.Return
	)
	if err := r.call(i, "GetMaxMigDeviceCount", func() nvml.Return { n, ret = h.GetMaxMigDeviceCount(); return ret }); err != nil {
		return err
	}
	old := r.mig[i]
	devs := make([]migDevice, 0, n)
	var firstErr error
	fail := func(err error) error {
		if errors.Is(err, source.ErrDeviceLost) || errors.Is(err, source.ErrUnavailable) || !r.weigh {
			return err
		}
		b.InstanceErrors++
		if b.InstanceErr == nil {
			b.InstanceErr = err
		}
		if firstErr == nil {
			firstErr = err
		}
		return nil
	}
	for j := range n {
		var (
			m    nvml.Device
			uuid string
		)
		if err := r.call(i, "GetMigDeviceHandleByIndex", func() nvml.Return {
			m, ret = h.GetMigDeviceHandleByIndex(j)
			if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
				m = nil // an empty slot
				return nvml.SUCCESS
			}
			return ret
		}); err != nil {
			if err := fail(err); err != nil {
				return err
			}
			continue
		}
		if m == nil {
			continue
		}
		if err := r.call(i, "GetUUID", func() nvml.Return { uuid, ret = m.GetUUID(); return ret }); err != nil {
			if err := fail(err); err != nil {
				return err
			}
			continue
		}
		d := migDevice{h: m, uuid: uuid, slices: 1, gi: -1}
		for _, o := range old {
			if o.uuid == uuid {
				d = o
				d.h = m
			}
		}
		if r.weigh && d.gi < 0 {
			r.describe(i, &d)
		}
		devs = append(devs, d)
	}
	// Devices gone since the previous read free their GPM samples.
	for _, o := range old {
		if o.prev != nil && !hasUUID(devs, o.uuid) {
			o.prev.Free()
		}
	}
	r.mig[i] = devs
	for k := range devs {
		m := &devs[k]
		var procs []nvml.ProcessInfo
		err := r.call(i, "GetComputeRunningProcesses", func() nvml.Return {
			procs, ret = m.h.GetComputeRunningProcesses()
			return ret
		})
		inst := Instance{UUID: m.uuid, Slices: m.slices, Activity: -1}
		if err != nil {
			if err := fail(err); err != nil {
				return err
			}
			inst.Failed = true
		} else {
			n0 := len(b.Processes)
			b.list(procs, m.uuid)
			inst.Processes = len(b.Processes) - n0
		}
		if r.weigh {
			inst.Activity = r.activity(i, m)
		}
		b.Instances = append(b.Instances, inst)
	}
	if r.weigh {
		b.weigh()
	}
	if !r.weigh && firstErr != nil {
		return firstErr
	}
	return nil
}

func hasUUID(devs []migDevice, uuid string) bool {
	for _, d := range devs {
		if d.uuid == uuid {
			return true
		}
	}
	return false
}

// describe reads MIG device d's compute slices and GPU instance id; what
// NVML cannot tell stays at its default (1 slice, no GPM).
func (r *ProcessReader) describe(i int, d *migDevice) {
	var (
		attrs nvml.DeviceAttributes
		gi    int
		ret   nvml.Return
	)
	if r.call(i, "GetAttributes", func() nvml.Return { attrs, ret = d.h.GetAttributes(); return ret }) == nil {
		switch {
		case attrs.ComputeInstanceSliceCount > 0:
			d.slices = attrs.ComputeInstanceSliceCount
		case attrs.GpuInstanceSliceCount > 0:
			d.slices = attrs.GpuInstanceSliceCount
		}
	}
	if r.call(i, "GetGpuInstanceId", func() nvml.Return { gi, ret = d.h.GetGpuInstanceId(); return ret }) == nil {
		d.gi = gi
	}
}

// r.gpm[i] values at and above gpmRetry count down the reads until a
// failed GpmQueryDeviceSupport is asked again (0 unknown, 1 supported, 2
// not supported).
const (
	gpmRetry      = 3
	gpmRetryReads = 30
)

// activity returns MIG device m's SM utilization in percent since the
// previous read, from GPM, or -1: GPM not supported on board i, the
// first read of m, or a failed GPM call.
func (r *ProcessReader) activity(i int, m *migDevice) float64 {
	s := r.s
	h := s.handles[i]
	switch {
	case r.gpm[i] > gpmRetry:
		r.gpm[i]-- // a failed query: count down the reads to its retry
	case r.gpm[i] == gpmRetry:
		r.gpm[i] = 0
	}
	if r.gpm[i] == 0 {
		var sup nvml.GpmSupport
		var ret nvml.Return
		switch err := r.call(i, "GpmQueryDeviceSupport", func() nvml.Return { sup, ret = h.GpmQueryDeviceSupport(); return ret }); {
		case err == nil && sup.IsSupportedDevice != 0:
			r.gpm[i] = 1
		case err == nil || ret == nvml.ERROR_NOT_SUPPORTED:
			r.gpm[i] = 2 // the board says no: for good
		default:
			// The query failed (a busy or resetting driver): not an
			// answer. Ask again in gpmRetryReads reads.
			r.gpm[i] = gpmRetry + gpmRetryReads
		}
	}
	if r.gpm[i] != 1 || m.gi < 0 {
		return -1
	}
	var cur nvml.GpmSample
	var ret nvml.Return
	if r.call(i, "GpmSampleAlloc", func() nvml.Return { cur, ret = s.lib.GpmSampleAlloc(); return ret }) != nil {
		return -1
	}
	if r.call(i, "GpmMigSampleGet", func() nvml.Return { return h.GpmMigSampleGet(m.gi, cur) }) != nil {
		cur.Free()
		return -1
	}
	prev := m.prev
	m.prev = cur
	if prev == nil {
		return -1
	}
	defer prev.Free()
	mg := &r.mg
	mg.NumMetrics, mg.Sample1, mg.Sample2 = 1, prev, cur
	mg.Metrics[0] = nvml.GpmMetric{MetricId: uint32(nvml.GPM_METRIC_SM_UTIL)}
	if r.call(i, "GpmMetricsGet", func() nvml.Return { return s.lib.GpmMetricsGet(mg) }) != nil ||
		nvml.Return(mg.Metrics[0].NvmlReturn) != nvml.SUCCESS {
		return -1
	}
	return min(max(mg.Metrics[0].Value, 0), 100)
}

// weigh sets each instance's weight and each MIG process's: by GPM
// activity times slices when every listed instance's activity is known,
// by slices otherwise; an instance's weight is divided evenly among its
// processes, and a failed instance's is UnlistedWeight.
func (b *BoardProcesses) weigh() {
	measured := len(b.Instances) > 0
	for _, in := range b.Instances {
		if in.Activity < 0 {
			measured = false
		}
	}
	const unit = 1_000_000
	for k := range b.Instances {
		in := &b.Instances[k]
		if measured {
			in.Weight = uint64(float64(in.Slices) * in.Activity / 100 * unit)
		} else {
			in.Weight = uint64(in.Slices) * unit
		}
		if in.Failed {
			b.UnlistedWeight += in.Weight
		}
	}
	for k := range b.Processes {
		p := &b.Processes[k]
		for _, in := range b.Instances {
			if in.UUID == p.Instance && in.Processes > 0 {
				p.Weight = in.Weight / uint64(in.Processes)
			}
		}
	}
}
