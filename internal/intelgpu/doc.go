// Package intelgpu reads the energy counters of Intel GPUs driven by i915
// or xe, from hwmon's energy1_input (µJ) under
// /sys/class/drm/card*/device/hwmon/hwmon*/, and offers them as a
// [source.Source] and a [source.Skipper]. No library is needed.
//
// # Counters
//
// Both drivers accumulate the GPU's 32-bit energy register into a 64-bit
// count each time the attribute is read (i915_hwmon.c, xe_hwmon.c), so
// energy1_input does not wrap while it is read more often than the
// register wraps (minutes at full power): [source.Device]'s CounterMax is
// 0. On i915 discrete GPUs energy1_input is the card's energy; on xe it is
// the card's where the driver also shows a package counter (energy2_input,
// not read here). [Source.ReadEnergy] returns µJ / 1000, rounded down, so
// totals are exact to the millijoule. The count starts when the driver
// loads and restarts with it; the tracker classes the drop as a reset.
//
// # Which GPUs
//
// Every card whose device has a hwmon directory named i915 or xe is a
// candidate, once per PCI device (connectors such as card0-DP-1 and render
// nodes are not cards). A card whose hwmon has no energy1_input (integrated
// i915 GPUs) is listed by [Source.Skipped] with a reason wrapping
// [source.ErrNotSupported]; one whose counter cannot be read, with
// [source.ErrRead] (and sysfscounter.ErrPermission when refused). hw.id is
// the PCI address, hw.name "Intel GPU" with the PCI device id and driver.
//
// # Power bound
//
// MaxWatts is power1_rated_max (the card's TDP, µW) × 2, where the driver
// shows it, and the sampler's default otherwise; it is an estimate, never
// firm, so the sampler may learn it up.
package intelgpu
