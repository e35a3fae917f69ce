//go:build cgo && linux

package main

import (
	"io"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/otelenergy/otelenergy/internal/nvmlsource"
	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// TestBackendPID opens the gateway's source over the fake DGX H100, whose
// GPU 0 runs the backend alone: -backend-pid makes the board the
// backend's; without it the gateway, on no board, is attributed, and the
// board is charged whole and flagged rather than given a share of 0.
func TestBackendPID(t *testing.T) {
	const backend = 4242
	tests := []struct {
		flag string
		want source.Share
	}{
		{flag: "4242", want: source.Share{Processes: 1, Split: true, Fraction: 1}},
		{flag: "4242, 4243", want: source.Share{Processes: 1, Split: true, Fraction: 1}},
		{flag: "", want: source.Share{Processes: 1, Shared: true}},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			srv := dgxh100.New()
			d := srv.Devices[0].(*server.Device)
			d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 1000, nvml.SUCCESS }
			d.GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) { return 200_000, 700_000, nvml.SUCCESS }
			d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
			d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: backend}}, nvml.SUCCESS
			}
			d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
			d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
				return nil, nvml.ERROR_NOT_FOUND
			}
			prev := newNVMLSource
			newNVMLSource = func(opts ...otelenergy.NVMLOption) (otelenergy.Source, error) {
				return otelenergy.NewNVMLSource(append(opts, nvmlsource.WithInterface(srv))...)
			}
			t.Cleanup(func() { newNVMLSource = prev })

			src, err := openSource(options{devices: "0", backendPIDs: tt.flag, out: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			if src.Kind() != "nvml" {
				t.Fatalf("source kind %q, want nvml", src.Kind())
			}
			if got := src.(source.Sharer).Share(0); got != tt.want {
				t.Errorf("-backend-pid %q: Share(0) = %+v, want %+v", tt.flag, got, tt.want)
			}
		})
	}
}
