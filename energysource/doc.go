// Package energysource finds and opens the energy sources of a node, each
// an [otelenergy.Source]: the accelerators (NVIDIA GPUs through NVML, AMD
// Instinct through AMD SMI, Intel GPUs through i915 and xe hwmon) and the
// host's CPU packages and DRAM (RAPL through powercap).
//
// It is a package of its own so that package otelenergy keeps its small
// API and its dependencies: AMD SMI is loaded with purego, which a program
// that meters NVIDIA GPUs only need not link.
//
// # Accelerators and the host
//
// A request's energy.millijoules is the accelerator's figure, so
// [Accelerator] and [Host] open separate sources: give the accelerator
// source to the Monitor whose requests are attributed, and the host's to
// the same Monitor through otelenergy.WithHostSource, which gives each
// request its CPU and DRAM share as well (open it without [WithProcesses]
// then: the Monitor splits it by CPU time itself), or to a Monitor of its
// own (or to the agent) for the node's figures alone. [Accelerator] tries NVML, AMD SMI
// and Intel hwmon in that order and takes the first that finds a readable
// device; [WithKinds] chooses which, and in what order.
//
// # What was found
//
// Every attempt is described by a [Finding]: the source's kind, the
// devices it reads, those it left out with the reason, and the error that
// made it unusable. [WithLogger] logs one line per attempt; the findings
// are also returned, so a program can report them its own way.
//
// # Without the hardware
//
// [WithSysfs] points the sysfs sources at another tree: a container's
// mount of the host's /sys, or a fake tree in a test. The AMD SMI source's
// tests run on a fake library (internal/amdsmi/amdsmitest).
package energysource
