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
// A [Set] turns the readings of a counter whose values run over [0, max]
// and then restart at 0 into a 64-bit counter that never wraps, in the
// counter's own unit, so that the wrap is exact to the microjoule and a
// later conversion to millijoules rounds once, not once per wrap. Which
// drop is a wrap is package tracker's rule, decided by a tracker.Tracker
// per counter: the previous reading in the top quarter of the range, the
// new one in the bottom quarter. Any other drop is passed on as a drop,
// which the Monitor's tracker classes as jitter or a reset, and the
// Monitor's tracker holds the unwrapped series to the device's power
// bound, so that a wrap the device could not have drawn is a glitch
// there, charged what it plausibly drew. A reading above max is an error
// wrapping [ErrOutOfRange], never a wrap, so that one bad reading cannot
// add a whole range of energy that was never drawn.
package sysfscounter
