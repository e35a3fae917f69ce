package amdsmi_test

import (
	"errors"
	"os"
	"testing"

	"github.com/otelenergy/otelenergy/internal/amdsmi"
	"github.com/otelenergy/otelenergy/internal/source"
)

// TestOpenWithoutROCm loads the real library where there is none: Open must
// fail with ErrUnavailable, without cgo too, and never crash.
func TestOpenWithoutROCm(t *testing.T) {
	if _, err := os.Stat("/opt/rocm/lib/libamd_smi.so"); err == nil {
		t.Skip("ROCm is installed")
	}
	l, err := amdsmi.Open()
	if !errors.Is(err, source.ErrUnavailable) {
		t.Fatalf("Open = %v, %v; want ErrUnavailable", l, err)
	}
	if _, err := amdsmi.New(); !errors.Is(err, source.ErrUnavailable) {
		t.Fatalf("New = %v, want ErrUnavailable", err)
	}
}
