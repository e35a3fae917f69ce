//go:build !(cgo && linux)

package nvmlsource_test

import (
	"errors"
	"testing"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
)

func TestStubNewUnavailable(t *testing.T) {
	s, err := nvmlsource.New()
	if !errors.Is(err, source.ErrUnavailable) {
		t.Fatalf("New() error = %v, want one wrapping source.ErrUnavailable", err)
	}
	if s != nil {
		t.Fatalf("New() source = %v, want nil", s)
	}
}

func TestStubSourceBehavesClosed(t *testing.T) {
	var s nvmlsource.Source
	if got := s.Kind(); got != "nvml" {
		t.Errorf("Kind() = %q, want %q", got, "nvml")
	}
	if got := s.Devices(); len(got) != 0 {
		t.Errorf("Devices() = %v, want none", got)
	}
	if got := s.Skipped(); len(got) != 0 {
		t.Errorf("Skipped() = %v, want none", got)
	}
	if _, err := s.ReadEnergy(0); !errors.Is(err, source.ErrUnavailable) {
		t.Errorf("ReadEnergy(0) error = %v, want one wrapping source.ErrUnavailable", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v, want nil", err)
	}
}
