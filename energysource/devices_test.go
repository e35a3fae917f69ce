package energysource_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/amdsmi/amdsmitest"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// TestDevicesRefusedOffNVML: only NVML can meter a chosen set of boards.
// AMD SMI and Intel hwmon meter every board of the host, so with devices
// named (the proxy's -devices) they refuse, saying why, rather than give a
// proxy in front of one board the energy of all the others.
func TestDevicesRefusedOffNVML(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []energysource.Option
	}{
		{"intel-hwmon", []energysource.Option{energysource.WithKinds(energysource.IntelHwmon), energysource.WithSysfs(node(t))}},
		{"amdsmi", []energysource.Option{energysource.WithKinds(energysource.AMDSMI), energysource.WithAMDNode(amdsmitest.NewMI300X(8))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			lg := energysource.WithLogger(slog.New(slog.NewTextHandler(&log, nil)))
			s, fs, err := energysource.Accelerator(append(c.opts, energysource.WithDevices("0"), lg)...)
			if err == nil {
				s.Close()
				t.Fatalf("WithDevices(\"0\"): %s opened with %d devices, want a refusal", s.Kind(), len(s.Devices()))
			}
			if !errors.Is(err, otelenergy.ErrNotSupported) || len(fs) != 1 || !strings.Contains(log.String(), "NVML only") {
				t.Errorf("error %v, findings %v, log %q: want ErrNotSupported, said once in the log", err, fs, log.String())
			}
			// Without devices named, the same source meters every board.
			s, _, err = energysource.Accelerator(append(c.opts, lg)...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if n := len(s.Devices()); n < 2 {
				t.Errorf("%s meters %d devices, want every board", s.Kind(), n)
			}
		})
	}
}
