// Package sourcekind names the kinds of energy source and reads a choice
// of them from a command line. It is a leaf, so that the binaries' flag
// tables, which deployment tests import, do not link the sources
// themselves (go-nvml, purego); package energysource re-exports it.
package sourcekind

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Kinds of source, as each source's Kind returns them.
const (
	NVML       = "nvml"
	AMDSMI     = "amdsmi"
	IntelHwmon = "intel-hwmon"
	RAPL       = "rapl"
)

// Auto is the choice that [Parse] reads as "try each known kind".
const Auto = "auto"

// ErrUnknown reports a kind this package does not know.
var ErrUnknown = errors.New("energysource: unknown source kind")

// ErrBadChoice reports a choice of sources [Parse] cannot read.
var ErrBadChoice = errors.New("energysource: bad choice of sources")

// Parse reads a choice of sources as a command line gives it: "auto" (nil:
// every known kind, in the default order), or a comma-separated list of
// kinds, each at most once, where "intel" is [IntelHwmon]. It fails with
// an error wrapping [ErrBadChoice] and, for a kind it does not know,
// [ErrUnknown].
func Parse(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == Auto {
		return nil, nil
	}
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		switch k {
		case "intel":
			k = IntelHwmon
		case NVML, AMDSMI, IntelHwmon, RAPL:
		case "":
			return nil, fmt.Errorf("%w: an empty kind in %q (want auto, or some of %s, %s, intel, %s)", ErrBadChoice, s, NVML, AMDSMI, RAPL)
		default:
			return nil, fmt.Errorf("%w: %w: %q (want auto, or some of %s, %s, intel, %s)", ErrBadChoice, ErrUnknown, k, NVML, AMDSMI, RAPL)
		}
		if slices.Contains(out, k) {
			return nil, fmt.Errorf("%w: %s named twice", ErrBadChoice, k)
		}
		out = append(out, k)
	}
	return out, nil
}
