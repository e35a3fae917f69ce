//go:build cgo && linux

package doctor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
)

// Check runs every check against this host's NVML (a fresh nvml.New()).
func Check(ctx context.Context, cfg Config) Report {
	return CheckNVML(ctx, nvml.New(), cfg)
}

// CheckNVML runs every check against lib, which it initializes and shuts
// down; tests pass go-nvml's mocks.
func CheckNVML(ctx context.Context, lib nvml.Interface, cfg Config) Report {
	cfg.defaults()
	var r Report
	checkLib(ctx, lib, cfg, &r)
	checkHost(cfg, &r)
	checkPIDNamespace(cfg, &r)
	checkExporter(ctx, cfg, &r)
	return r
}

// initFix says what to do about a failed nvml.Init.
func initFix(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "install the NVIDIA driver; in a container, run it with the NVIDIA container toolkit (runtimeClassName: nvidia, or docker --gpus all) and NVIDIA_DRIVER_CAPABILITIES=utility"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "load the NVIDIA kernel driver (nvidia-smi must work on the host)"
	case nvml.ERROR_NO_PERMISSION:
		return "give the process access to /dev/nvidia*: run it with the NVIDIA container toolkit, or as a user in the video group"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "reboot, or reload the driver, so that libnvidia-ml and the kernel module have the same version"
	}
	return "check the driver with nvidia-smi"
}

// meteredBoard is a chosen board whose counter answered.
type meteredBoard struct {
	name string
	h    nvml.Device
}

func checkLib(ctx context.Context, lib nvml.Interface, cfg Config, r *Report) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		// No other NVML call: it could kill the process.
		r.fail("nvml", initFix(ret), "not usable: %v", nvmlsource.ReturnError("Init", ret))
		return
	}
	defer lib.Shutdown()
	drv, ret := lib.SystemGetDriverVersion()
	nv, ret2 := lib.SystemGetNVMLVersion()
	if ret == nvml.SUCCESS && ret2 == nvml.SUCCESS {
		r.ok("nvml", "driver %s, NVML %s", drv, nv)
	} else {
		r.warn("nvml", "", "versions unreadable: %v, %v", nvmlsource.ReturnError("SystemGetDriverVersion", ret), nvmlsource.ReturnError("SystemGetNVMLVersion", ret2))
	}

	env := func(k string) string {
		if v, ok := cfg.LookupEnv(k); ok {
			return fmt.Sprintf("%s=%q", k, v)
		}
		return k + " unset"
	}
	r.ok("GPU selection", "%s, %s, -devices %q", env("CUDA_VISIBLE_DEVICES"), env("NVIDIA_VISIBLE_DEVICES"), cfg.Devices)
	choices, why, notes, err := nvmlsource.Visibility(lib, cfg.Devices, cfg.LookupEnv)
	for _, n := range notes {
		r.warn("GPU selection", "correct or remove the entry", "%v", n)
	}
	switch {
	case errors.Is(err, source.ErrUnavailable):
		r.fail("GPU selection", "check the driver with nvidia-smi", "%v", err)
		return
	case err != nil && len(cfg.Devices) > 0:
		r.fail("GPU selection", "name GPUs that NVML shows in -devices (OTELENERGY_DEVICES)", "%v", err)
	case err != nil:
		r.fail("GPU selection", "unset CUDA_VISIBLE_DEVICES, or name GPUs NVML shows in it", "%v", err)
	case len(choices) == 0:
		r.fail("GPU selection", "give the container the GPUs: runtimeClassName: nvidia with NVIDIA_VISIBLE_DEVICES=all (docker --gpus all)", "NVML shows no GPU")
		return
	}

	var boards []meteredBoard
	for _, c := range choices {
		name := fmt.Sprintf("GPU %d", c.Index)
		switch {
		case c.Err != nil:
			r.fail(name, "check the board with nvidia-smi -q, and dmesg for Xid errors", "cannot be identified: %v", c.Err)
		case !c.Chosen:
			r.ok(name, "%s left out: %s", c.UUID, why)
		default:
			h, _ := lib.DeviceGetHandleByIndex(c.Index)
			if b, ok := checkBoard(name, c.UUID, h, cfg, r); ok {
				boards = append(boards, b)
			}
		}
	}
	measure(ctx, boards, cfg, r)
}

// checkBoard checks one chosen board and reports whether its counter
// answered, so that it is measured.
func checkBoard(name, uuid string, h nvml.Device, cfg Config, r *Report) (meteredBoard, bool) {
	model, ret := h.GetName()
	if ret != nvml.SUCCESS {
		model = "(name unreadable)"
	}
	r.ok(name, "%s %s metered", uuid, model)

	counterOK := false
	switch _, ret := h.GetTotalEnergyConsumption(); ret {
	case nvml.SUCCESS:
		counterOK = true
	case nvml.ERROR_NOT_SUPPORTED:
		r.fail(name+" energy counter", "none on this board (older than Volta, or a vGPU profile without it): it is left out; meter Volta or newer boards",
			"not supported: %v", nvmlsource.ReturnError("GetTotalEnergyConsumption", ret))
	default:
		r.fail(name+" energy counter", "check the board with nvidia-smi -q and dmesg (Xid errors); reset it with nvidia-smi -r",
			"%v", nvmlsource.ReturnError("GetTotalEnergyConsumption", ret))
	}

	lo, hi, ret := h.GetPowerManagementLimitConstraints()
	enf, ret2 := h.GetEnforcedPowerLimit()
	switch {
	case ret == nvml.SUCCESS && ret2 == nvml.SUCCESS:
		r.ok(name+" power limit", "%.0f W enforced, settable %.0f-%.0f W", float64(enf)/1000, float64(lo)/1000, float64(hi)/1000)
	case ret2 == nvml.SUCCESS:
		r.warn(name+" power limit", "", "%.0f W enforced; the constraints do not answer (%v), so readings are bounded by a limit that can be raised at run time",
			float64(enf)/1000, nvmlsource.ReturnError("GetPowerManagementLimitConstraints", ret))
	default:
		r.warn(name+" power limit", "", "unreadable (%v): readings are bounded by the sampler's default", nvmlsource.ReturnError("GetEnforcedPowerLimit", ret2))
	}

	mig := false
	var listers []nvml.Device
	switch mode, _, ret := h.GetMigMode(); {
	case ret == nvml.SUCCESS && mode == nvml.DEVICE_MIG_ENABLE:
		mig = true
		n, ret := h.GetMaxMigDeviceCount()
		for j := 0; ret == nvml.SUCCESS && j < n; j++ {
			if m, ret := h.GetMigDeviceHandleByIndex(j); ret == nvml.SUCCESS {
				listers = append(listers, m)
			}
		}
		r.ok(name+" MIG", "enabled, %d instances: energy is the board's; processes get shares by instance, marked otelenergy.energy.shared", len(listers))
	case ret == nvml.SUCCESS:
		r.ok(name+" MIG", "disabled")
		listers = []nvml.Device{h}
	case ret == nvml.ERROR_NOT_SUPPORTED:
		r.ok(name+" MIG", "not supported by this board")
		listers = []nvml.Device{h}
	default:
		r.warn(name+" MIG", "", "mode unreadable (%v): listed as a whole board", nvmlsource.ReturnError("GetMigMode", ret))
		listers = []nvml.Device{h}
	}

	var pids []uint32
	listed := true
	for _, l := range listers {
		procs, ret := l.GetComputeRunningProcesses()
		switch ret {
		case nvml.SUCCESS:
			for _, p := range procs {
				if !slices.Contains(pids, p.Pid) {
					pids = append(pids, p.Pid)
				}
			}
			continue
		case nvml.ERROR_NO_PERMISSION:
			r.fail(name+" process listing", "run with the privileges NVML asks for here (root in the host's PID namespace); without them no process gets energy",
				"%v", nvmlsource.ReturnError("GetComputeRunningProcesses", ret))
		default:
			r.fail(name+" process listing", "check the board with nvidia-smi; until it lists, its active energy is unattributed",
				"%v", nvmlsource.ReturnError("GetComputeRunningProcesses", ret))
		}
		listed = false
		break
	}
	if listed {
		r.ok(name+" process listing", "%d compute processes", len(pids))
		checkPids(cfg, name, pids, r)
	}

	if mig {
		r.ok(name+" process utilization", "not available under MIG, by NVML's design")
	} else {
		switch _, ret := h.GetProcessUtilization(0); ret {
		case nvml.SUCCESS, nvml.ERROR_NOT_FOUND:
			r.ok(name+" process utilization", "supported: shares follow each process's SM utilization")
		case nvml.ERROR_NOT_SUPPORTED:
			r.warn(name+" process utilization", "", "not supported (a vGPU?): processes get even shares, marked otelenergy.energy.shared")
		default:
			r.warn(name+" process utilization", "", "%v: shares fall back to even splits while it fails", nvmlsource.ReturnError("GetProcessUtilization", ret))
		}
	}
	return meteredBoard{name: name, h: h}, counterOK
}

// watch is what measure learns of one board's counter.
type watch struct {
	last    uint64
	steps   []time.Time
	energy  []uint64 // the counter at each step
	power   []float64
	failed  error
	resets  int
	powerNA bool
}

// measure reads every board's counter every Poll for Window, or until ctx
// ends, and records when each steps; GetPowerUsage is read every 100 ms
// beside it.
func measure(ctx context.Context, boards []meteredBoard, cfg Config, r *Report) {
	if len(boards) == 0 {
		return
	}
	ws := make([]watch, len(boards))
	for i, b := range boards {
		ws[i].last, _ = b.h.GetTotalEnergyConsumption()
	}
	start := cfg.Now()
	nextPower := start
	for now := start; now.Sub(start) < cfg.Window && ctx.Err() == nil; now = cfg.Now() {
		for i, b := range boards {
			w := &ws[i]
			e, ret := b.h.GetTotalEnergyConsumption()
			if ret != nvml.SUCCESS {
				w.failed = nvmlsource.ReturnError("GetTotalEnergyConsumption", ret)
				continue
			}
			if e != w.last {
				if e < w.last {
					w.resets++
				}
				w.steps, w.energy = append(w.steps, now), append(w.energy, e)
				w.last = e
			}
		}
		if !now.Before(nextPower) {
			nextPower = now.Add(100 * time.Millisecond)
			for i, b := range boards {
				if mw, ret := b.h.GetPowerUsage(); ret == nvml.SUCCESS {
					ws[i].power = append(ws[i].power, float64(mw)/1000)
				} else {
					ws[i].powerNA = true
				}
			}
		}
		cfg.Sleep(cfg.Poll)
	}
	for i, b := range boards {
		report(b.name, &ws[i], cfg, r)
	}
}

func report(name string, w *watch, cfg Config, r *Report) {
	check := name + " energy counter"
	switch {
	case w.failed != nil:
		r.fail(check, "check the board with nvidia-smi -q and dmesg (Xid errors)", "failed while watched: %v", w.failed)
		return
	case w.resets > 0:
		r.fail(check, "find what resets the GPU or reloads the driver (dmesg); the agent charges each reset's first reading in full",
			"went backwards %d times in %v", w.resets, cfg.Window)
		return
	case len(w.steps) < 3:
		r.fail(check, "watch it longer (-window 10s); a counter that never steps on a powered board needs a GPU reset (nvidia-smi -r)",
			"stepped %d times in %v", len(w.steps), cfg.Window)
		return
	}
	gaps := make([]time.Duration, len(w.steps)-1)
	for k := range gaps {
		gaps[k] = w.steps[k+1].Sub(w.steps[k])
	}
	slices.Sort(gaps)
	period := gaps[len(gaps)/2]
	r.ok(check, "steps every %v (the median of %d intervals between steps in %v)", period.Round(time.Millisecond/10), len(gaps), cfg.Window)

	span := w.steps[len(w.steps)-1].Sub(w.steps[0]).Seconds()
	counterW := float64(w.energy[len(w.energy)-1]-w.energy[0]) / 1000 / span
	if len(w.power) == 0 {
		r.ok(name+" power", "%.1f W from the counter; GetPowerUsage does not answer", counterW)
		return
	}
	var sum float64
	for _, p := range w.power {
		sum += p
	}
	usage := sum / float64(len(w.power))
	// GetPowerUsage averages part-time samples over about a second, and
	// boards differ by a gain of about 5%: agreement within 10% or 10 W
	// is all a few seconds can show.
	if tol := math.Max(0.10*math.Max(counterW, usage), 10); math.Abs(counterW-usage) > tol {
		r.warn(name+" power", "compare again under a steady load; if they still differ, trust the counter, which the agent uses",
			"%.1f W from the counter, %.1f W from GetPowerUsage: they differ by more than 10%% and 10 W", counterW, usage)
		return
	}
	r.ok(name+" power", "%.1f W from the counter, %.1f W from GetPowerUsage: they agree", counterW, usage)
}
