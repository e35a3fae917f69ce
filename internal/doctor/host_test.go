package doctor_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/otelenergy/otelenergy/energysource"
	"github.com/otelenergy/otelenergy/internal/doctor"
	"github.com/otelenergy/otelenergy/internal/fakesysfs"
	"github.com/otelenergy/otelenergy/internal/rapl"
)

func sysTree(t *testing.T, trees ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, tr := range trees {
		if err := fakesysfs.Write(root, filepath.FromSlash(tr)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestHostZoneLeftOut: a RAPL zone whose max_energy_range_uj cannot be
// read is left out and the others metered, and the report warns about it,
// psys included, rather than report RAPL absent.
func TestHostZoneLeftOut(t *testing.T) {
	node := sysTree(t, "../rapl/testdata/twosocket.tree")
	for _, z := range []string{"intel-rapl:0:1", "intel-rapl:2"} {
		if err := os.Remove(filepath.Join(node, "class", "powercap", z, "max_energy_range_uj")); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	doctor.Check(context.Background(), doctor.Config{SysRoot: node, LookupEnv: envOf(map[string]string{"OTEL_METRICS_EXPORTER": "none"})}).WriteTo(&out)
	report := out.String()
	lacks := slices.DeleteFunc([]string{
		"ok    rapl: 3 device(s): cpu intel-rapl:0 (package-0), cpu intel-rapl:1 (package-1), memory intel-rapl:1:1",
		"WARN  rapl intel-rapl:0:1: dram package-0 left out: ",
		"max_energy_range_uj",
		"WARN  rapl psys: left out: ",
	}, func(w string) bool { return strings.Contains(report, w) })
	if len(lacks) > 0 || strings.Contains(report, "rapl: absent") {
		t.Errorf("report lacks %q (or says RAPL is absent):\n%s", lacks, report)
	}
}

// TestHostSources runs the checks on a node with two Intel GPUs and a
// two-socket RAPL tree, then on one with neither: each source is listed
// as found with its devices, or absent with the reason.
func TestHostSources(t *testing.T) {
	node := sysTree(t, "../intelgpu/testdata/twogpus.tree", "../rapl/testdata/twosocket.tree")
	r := doctor.Check(context.Background(), doctor.Config{SysRoot: node, LookupEnv: envOf(map[string]string{"OTEL_METRICS_EXPORTER": "none"})})
	var out bytes.Buffer
	r.WriteTo(&out)
	for _, want := range []string{
		"ok    intel-hwmon: 2 device(s): gpu ",
		"ok    rapl: 4 device(s): cpu intel-rapl:0 (package-0), memory intel-rapl:0:1 (dram package-0)",
		"ok    rapl psys: 1 device(s): host intel-rapl:2 (psys): the whole platform, exported as hw.host.energy only",
		"ok    amdsmi: absent: ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	r = doctor.Check(context.Background(), doctor.Config{SysRoot: t.TempDir(), LookupEnv: envOf(map[string]string{"OTEL_METRICS_EXPORTER": "none"})})
	out.Reset()
	r.WriteTo(&out)
	for _, want := range []string{"ok    intel-hwmon: absent: ", "ok    rapl: absent: ", "class/powercap"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "rapl psys") {
		t.Errorf("psys listed on a node without it:\n%s", out.String())
	}
}

// TestHostRefused: RAPL counters refused as a non-root user is refused
// (CVE-2020-8694) are warnings whose fix names the grant.
func TestHostRefused(t *testing.T) {
	root := sysTree(t, "../rapl/testdata/twosocket.tree")
	refuse := func(dirs ...string) func(string) (*os.File, error) {
		return func(name string) (*os.File, error) {
			if slices.Contains(dirs, filepath.Base(filepath.Dir(name))) {
				return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
			}
			return os.Open(name)
		}
	}
	s, err := rapl.New(rapl.WithRoot(root), rapl.WithOpen(refuse("intel-rapl:1:1")))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	var r doctor.Report
	doctor.ReportSource(energysource.Finding{Kind: rapl.Kind, Devices: s.Devices(), Skipped: s.Skipped()}, &r)
	_, err = rapl.New(rapl.WithRoot(root), rapl.WithOpen(refuse("intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1", "intel-rapl:1:1")))
	doctor.ReportSource(energysource.Finding{Kind: rapl.Kind, Err: err}, &r)
	var out bytes.Buffer
	r.WriteTo(&out)
	for _, want := range []string{
		"ok    rapl: 3 device(s)",
		"WARN  rapl intel-rapl:1:1: dram package-1 left out: ",
		"WARN  rapl: refused: ",
		"fix: run the agent as root with /sys mounted read-only, or give its group read access to energy_uj with a udev rule",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if r.Failed() {
		t.Error("a refused RAPL fails the doctor; the agent runs without it")
	}
}
