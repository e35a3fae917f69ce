package energysource_test

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/amdsmi/amdsmitest"
	"github.com/otelenergy/otelenergy/internal/fakesysfs"
	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/internal/sourcekind"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// node writes a fake /sys with two Intel GPUs and a two-socket RAPL tree.
func node(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"../internal/intelgpu/testdata/twogpus.tree", "../internal/rapl/testdata/twosocket.tree"} {
		if err := fakesysfs.Write(root, filepath.FromSlash(d)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestAccelerator(t *testing.T) {
	root := node(t)
	var log bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&log, nil))
	nd := amdsmitest.NewMI300X(8)
	nd.Boards[2].EnergyStatus = 2 // NOT_SUPPORTED
	s, fs, err := energysource.Accelerator(energysource.WithSysfs(root), energysource.WithLogger(lg), energysource.WithAMDNode(nd))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Kind() != energysource.AMDSMI || len(s.Devices()) != 7 {
		t.Fatalf("opened %s with %d devices, want amdsmi with 7", s.Kind(), len(s.Devices()))
	}
	// NVML comes first and is unusable here (no driver, or no cgo); AMD
	// SMI is used and Intel hwmon is not tried.
	if len(fs) != 2 || fs[0].Kind != energysource.NVML || fs[0].Err == nil || fs[1].Kind != energysource.AMDSMI || fs[1].Err != nil {
		t.Fatalf("findings %v", fs)
	}
	if !errors.Is(fs[0].Err, otelenergy.ErrUnavailable) && !errors.Is(fs[0].Err, otelenergy.ErrNoDevices) {
		t.Errorf("NVML finding %v", fs[0].Err)
	}
	line := fs[1].String()
	for _, want := range []string{"amdsmi: 7 device(s)", "gpu 5c00d1a3", "AMD Instinct MI300X", "left out 5c02d1a3", "NOT_SUPPORTED"} {
		if !strings.Contains(line, want) {
			t.Errorf("finding %q lacks %q", line, want)
		}
	}
	if n := strings.Count(log.String(), "\n"); n != 2 {
		t.Errorf("%d log lines, want one per source tried:\n%s", n, log.String())
	}
}

func TestAcceleratorKinds(t *testing.T) {
	root := node(t)
	s, fs, err := energysource.Accelerator(energysource.WithSysfs(root), energysource.WithKinds(energysource.IntelHwmon))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Kind() != energysource.IntelHwmon || len(s.Devices()) != 2 || len(fs) != 1 {
		t.Fatalf("opened %s with %d devices, findings %v", s.Kind(), len(s.Devices()), fs)
	}
	if !strings.Contains(fs[0].String(), "left out 0000:00:02.0") {
		t.Errorf("finding %q does not name the integrated GPU it left out", fs[0])
	}
	_, fs, err = energysource.Accelerator(energysource.WithSysfs(t.TempDir()), energysource.WithKinds(energysource.IntelHwmon, energysource.RAPL, "tpu"))
	if !errors.Is(err, otelenergy.ErrNoDevices) || !errors.Is(err, otelenergy.ErrUnavailable) || !errors.Is(err, energysource.ErrUnknownKind) {
		t.Fatalf("Accelerator with nothing usable = %v", err)
	}
	if len(fs) != 2 {
		t.Fatalf("findings %v, want intel and tpu", fs)
	}
}

func TestHost(t *testing.T) {
	root := node(t)
	s, f, err := energysource.Host(energysource.WithSysfs(root))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var types []string
	for _, d := range s.Devices() {
		types = append(types, d.HWType())
	}
	if strings.Join(types, ",") != "cpu,memory,cpu,memory" {
		t.Fatalf("host devices %v, want package and dram of two sockets", types)
	}
	if !strings.HasPrefix(f.String(), "rapl: 4 device(s) [cpu intel-rapl:0 (package-0)") {
		t.Errorf("finding %q", f)
	}
	if _, _, err := energysource.Host(energysource.WithSysfs(root), energysource.WithRAPLDomains("psys", "dram")); err == nil {
		t.Fatal("psys with dram accepted")
	}
}

func TestParseKinds(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  error
	}{
		{"auto", nil, nil},
		{"nvml", []string{"nvml"}, nil},
		{"amdsmi, intel,rapl", []string{"amdsmi", "intel-hwmon", "rapl"}, nil},
		{"intel-hwmon,nvml", []string{"intel-hwmon", "nvml"}, nil},
		{"nvml,tpu", nil, energysource.ErrUnknownKind},
		{"nvml,,rapl", nil, energysource.ErrBadChoice},
		{"rapl,rapl", nil, energysource.ErrBadChoice},
		{"", nil, energysource.ErrBadChoice},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := energysource.ParseKinds(tt.in)
			if tt.err != nil {
				if !errors.Is(err, tt.err) || !errors.Is(err, energysource.ErrBadChoice) {
					t.Fatalf("ParseKinds(%q) = %v, %v; want %v", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("ParseKinds(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

// TestHostRefused: a zone the kernel refuses (energy_uj is root-only since
// CVE-2020-8694) is named in the finding and its log line, with the grant
// that is missing; when every zone is refused, Host fails with that
// reason.
func TestHostRefused(t *testing.T) {
	root := node(t)
	refuse := func(dirs ...string) func(string) (*os.File, error) {
		return func(name string) (*os.File, error) {
			if slices.Contains(dirs, filepath.Base(filepath.Dir(name))) {
				return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
			}
			return os.Open(name)
		}
	}
	var log bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&log, nil))
	s, f, err := energysource.Host(energysource.WithSysfs(root), energysource.WithLogger(lg), energysource.WithRAPLOpen(refuse("intel-rapl:1:1")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, out := range []string{f.String(), log.String()} {
		for _, want := range []string{"3 device(s)", "left out intel-rapl:1:1", "CVE-2020-8694", "root", "udev"} {
			if !strings.Contains(out, want) {
				t.Errorf("%q lacks %q", out, want)
			}
		}
	}
	_, f, err = energysource.Host(energysource.WithSysfs(root), energysource.WithRAPLOpen(refuse("intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1", "intel-rapl:1:1")))
	if !errors.Is(err, fs.ErrPermission) || !errors.Is(err, otelenergy.ErrNoDevices) || !errors.Is(f.Err, fs.ErrPermission) {
		t.Fatalf("Host with every zone refused = %v", err)
	}
	if !strings.Contains(f.String(), "unusable") || !strings.Contains(f.String(), "udev") {
		t.Errorf("finding %q", f)
	}
}

// TestKindNames keeps the leaf package's names, which the flag tables
// read, those the sources report.
func TestKindNames(t *testing.T) {
	for _, k := range [][2]string{
		{sourcekind.AMDSMI, energysource.AMDSMI}, {sourcekind.IntelHwmon, energysource.IntelHwmon},
		{sourcekind.RAPL, energysource.RAPL}, {sourcekind.NVML, energysource.NVML},
	} {
		if k[0] != k[1] {
			t.Errorf("sourcekind %q, source %q", k[0], k[1])
		}
	}
}

// setOf is a fixed process set that counts its reads.
type setOf struct {
	pids  []int
	reads atomic.Int32
}

func (s *setOf) AppendPIDs(dst []int) []int { s.reads.Add(1); return append(dst, s.pids...) }

// TestProcessSetAtOpen: RAPL takes a process set's members once, when it
// opens, as it takes WithProcesses' pids: its zones are then split by
// their CPU time (Processes -1, Shared) rather than charged whole.
func TestProcessSetAtOpen(t *testing.T) {
	root := node(t)
	whole, _, err := energysource.Host(energysource.WithSysfs(root))
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	set := &setOf{pids: []int{os.Getpid()}}
	s, _, err := energysource.Host(energysource.WithSysfs(root), energysource.WithProcessSet(set))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sw, ss := whole.(source.Sharer), s.(source.Sharer)
	if got := sw.Share(0); !got.Split || got.Fraction != 1 || got.Shared {
		t.Errorf("without a set: share %+v, want the zone whole", got)
	}
	if got := ss.Share(0); got.Processes != -1 || !got.Shared {
		t.Errorf("with a set of this process: share %+v, want one by CPU time", got)
	}
	if n := set.reads.Load(); n != 1 {
		t.Errorf("the set was read %d times, want once, at open", n)
	}
}
