package doctor

import (
	"errors"
	"fmt"
	"strings"

	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/rapl"
	"github.com/otelenergy/otelenergy/internal/source"
)

// raplGrant is the fix for a refused RAPL counter.
const raplGrant = "run the agent as root with /sys mounted read-only, or give its group read access to energy_uj with a udev rule " +
	"or a sysfs.conf line and add that group (supplementalGroups in Kubernetes); see docs/operations.md, \"CPU and DRAM (RAPL)\""

// checkHost lists the sources beside NVML: AMD SMI, Intel hwmon, and the
// host's RAPL domains, each found, absent or refused, and why.
func checkHost(cfg Config, r *Report) {
	opts := []energysource.Option{energysource.WithSysfs(cfg.SysRoot)}
	for _, k := range []string{energysource.AMDSMI, energysource.IntelHwmon} {
		s, f, _ := energysource.Open(k, opts...)
		if s != nil {
			s.Close()
		}
		reportSource(f, r)
	}
	s, f, _ := energysource.Host(opts...)
	if s != nil {
		s.Close()
	}
	reportSource(f, r)
	s, f, err := energysource.Host(append(opts, energysource.WithRAPLDomains(rapl.Psys))...)
	if s != nil {
		s.Close()
	}
	switch {
	case err == nil:
		r.ok("rapl psys", "%s: the whole platform, exported as hw.host.energy only", deviceList(f))
	case errors.Is(err, source.ErrRead):
		// A psys zone that is there but cannot be read (no readable
		// max_energy_range_uj, a refused counter) is left out; without
		// this line the report would look healthy.
		fix := fixFor(rapl.Kind)
		if errors.Is(err, rapl.ErrPermission) {
			fix = raplGrant
		}
		r.warn("rapl psys", fix, "left out: %v", err)
	}
}

// reportSource turns a source's finding into report lines: found (ok),
// absent (ok: nothing to meter), refused or unreadable (warn, with the
// fix), and each device it left out for a reason other than a choice.
func reportSource(f energysource.Finding, r *Report) {
	check := f.Kind
	switch {
	case f.Err == nil:
		r.ok(check, "%s", deviceList(f))
	case errors.Is(f.Err, rapl.ErrPermission):
		r.warn(check, raplGrant, "refused: %v", f.Err)
	case errors.Is(f.Err, source.ErrUnavailable):
		r.ok(check, "absent: %v", f.Err)
	default:
		r.warn(check, fixFor(f.Kind), "unusable: %v", f.Err)
	}
	for _, sk := range f.Skipped {
		if errors.Is(sk.Reason, source.ErrNotVisible) {
			continue // a choice, not a problem
		}
		fix := fixFor(f.Kind)
		if errors.Is(sk.Reason, rapl.ErrPermission) {
			fix = raplGrant
		}
		r.warn(check+" "+sk.Device.ID, fix, "%s left out: %v", sk.Device.Name, sk.Reason)
	}
}

func fixFor(kind string) string {
	switch kind {
	case energysource.AMDSMI:
		return "install ROCm 6.3 or later (libamd_smi.so) on the host and give the container /dev/kfd and /dev/dri; see docs/operations.md"
	case energysource.IntelHwmon:
		return "load the i915 or xe driver and mount the host's /sys (-sys-root); see docs/operations.md"
	}
	return "see docs/operations.md"
}

// deviceList is "n device(s): id (name), ...".
func deviceList(f energysource.Finding) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d device(s)", len(f.Devices))
	for i, d := range f.Devices {
		sep := ": "
		if i > 0 {
			sep = ", "
		}
		fmt.Fprintf(&b, "%s%s %s (%s)", sep, d.HWType(), d.ID, d.Name)
	}
	return b.String()
}
