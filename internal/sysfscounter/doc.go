// Package sysfscounter reads the cumulative microjoule counters that Linux
// exposes as sysfs attributes (powercap's energy_uj, hwmon's
// energy1_input) and turns a counter that wraps at a known maximum into one
// that never does.
//
// # Reading
//
// A [File] keeps its attribute open and rereads it with pread at offset 0,
// which makes sysfs call the attribute's show method afresh (see the
// kernel's Documentation/filesystems/sysfs.rst: "re-read ... seek back to
// offset 0"). A read allocates nothing and makes one system call, where
// opening the file anew each time, as os.ReadFile does, makes three and
// allocates.
//
// # Permissions
//
// Since CVE-2020-8694 the kernel makes powercap's energy_uj readable by
// root only. [Open] reports a refused open as an error wrapping
// [ErrPermission] and fs.ErrPermission, naming the file; the sources say
// which grant is missing.
//
// # Wraps
//
// An [Extender] turns the readings of a counter whose values run over
// [0, max] and then restart at 0 into a 64-bit counter that never wraps,
// in the counter's own unit, so that the wrap is exact to the microjoule
// and a later conversion to millijoules rounds once, not once per wrap.
// A reading below the previous one is a wrap only when the previous lay in
// the top quarter of the range and the new one in the bottom quarter, the
// rule package tracker uses; any other drop is passed on as a drop, which
// the tracker classes as jitter or a reset.
package sysfscounter
