// Package rapl reads the CPU and DRAM energy counters that Linux exposes
// through the powercap framework (/sys/class/powercap/intel-rapl*, on
// Intel CPUs and, since Linux 5.8, on AMD ones) and offers them as a
// [source.Source] and a [source.Skipper].
//
// Zones are found under class/powercap as prometheus/procfs's
// sysfs.GetRaplZones finds them (and Kepler with it), but zone by zone: a
// zone whose max_energy_range_uj cannot be read (psys on some platforms)
// is skipped with its reason ([Source.Skipped], wrapping
// [source.ErrRead]) and the others are metered, and the directories of
// other control types (dtpm, ...) are never read. Each chosen zone's
// energy_uj is then kept open and reread (see package sysfscounter), so a
// reading allocates nothing.
//
// # Domains and double counting
//
// powercap nests its zones: a package zone (intel-rapl:N, "package-N")
// holds its core and uncore subzones, which are parts of it; its dram
// subzone is not part of it; psys (Intel's platform domain, where present)
// covers the package, DRAM and more. Summing a zone and its parts counts
// energy twice, so [New] meters package and dram by default and refuses a
// choice ([WithDomains]) that overlaps: psys with anything else, or
// package with core or uncore. The MMIO interface (intel-rapl-mmio:N)
// repeats a package zone that the MSR interface already shows; it is used
// only for a package the MSR interface does not show.
//
// Each device's hw.type is "cpu" for package, core and uncore, "memory"
// for dram, and "host" for psys, a whole-platform figure that semantic
// conventions would put under hw.host.energy.
//
// # Wraps
//
// energy_uj runs over [0, max_energy_range_uj] and then restarts at 0: on a
// 32-bit MSR at the usual 61 µJ unit, every 262 kJ, about 20 minutes at
// 200 W. A range that is not a whole number of millijoules cannot be
// unwrapped exactly after conversion to millijoules, so the source
// unwraps in microjoules itself (sysfscounter.Set, whose wraps are
// package tracker's decisions), and [Source.ReadEnergy] returns the
// unwrapped count divided by 1000: the total is exact to the microjoule at
// every reading and rounded down to the millijoule once. [source.Device]'s
// CounterMax is 0, and the Monitor's tracker holds the unwrapped series to
// the zone's power bound, so that a wrap the package could not have drawn
// is a glitch, charged what it plausibly drew. A reading above
// max_energy_range_uj is a read error (sysfscounter.ErrOutOfRange), never
// a wrap. A wrap is seen only when the counter is read at least once per
// quarter of its range (about 5 minutes at 200 W); the sampler reads it
// every few tens of milliseconds.
//
// # Shared nodes
//
// With [WithProcesses], [Source.Share] gives the named processes' share
// of the node's CPU time (package cputime), read every 5 s: the Monitor
// charges that part of every zone to its requests and the rest to other
// processes. Without it every zone is the requests' whole.
//
// # Permissions
//
// Since CVE-2020-8694 (Platypus) energy_uj is readable only by root. A zone
// whose counter cannot be opened is left out and listed by
// [Source.Skipped] with a reason that wraps [ErrPermission],
// fs.ErrPermission and [source.ErrRead], and says which grant is missing:
// run as root (a DaemonSet with /sys mounted read-only), or give a group
// read access with a udev rule or a sysfs.conf line (see
// docs/operations.md). When no chosen zone can be read, [New] fails with
// an error wrapping [source.ErrNoDevices] and each zone's reason.
package rapl
