//go:build !(linux && (amd64 || arm64))

package amdsmi

import (
	"fmt"

	"github.com/otelenergy/otelenergy/internal/source"
)

// Open fails with an error wrapping [source.ErrUnavailable]: AMD SMI is
// loaded through purego, which this package uses on linux/amd64 and
// linux/arm64 only.
func Open() (Lib, error) {
	return nil, fmt.Errorf("%w: amdsmi: AMD SMI is read on linux/amd64 and linux/arm64 only", source.ErrUnavailable)
}
