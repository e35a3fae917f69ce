package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/app"
	"github.com/otelenergy/otelenergy/otelenergy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

// TestDefaultsAgree checks the flags' defaults, which depend on the
// standard library only, against the packages that own them.
func TestDefaultsAgree(t *testing.T) {
	if flags.DefaultSampleInterval != otelenergy.DefaultInterval {
		t.Fatalf("-sample-interval's default %v, the library's %v", flags.DefaultSampleInterval, otelenergy.DefaultInterval)
	}
}

func TestRunExitStatus(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if got := run(context.Background(), []string{"-max-series", "x"}, env(nil), &stdout, &stderr, app.Deps{}); got != 2 {
		t.Fatalf("invalid flag: status %d, want 2", got)
	}
	if s := strings.TrimSpace(stderr.String()); strings.Contains(s, "\n") || !strings.Contains(s, "-max-series") {
		t.Fatalf("stderr %q: want one line naming the flag", s)
	}
	stderr.Reset()
	if got := run(context.Background(), []string{"-simulate", "-carbon-intensity", "436", "-pue", "0.9"}, env(nil), &stdout, &stderr, app.Deps{}); got != 2 {
		t.Fatalf("invalid carbon flag: status %d, want 2", got)
	}
	if s := strings.TrimSpace(stderr.String()); strings.Contains(s, "\n") || !strings.Contains(s, "-pue") {
		t.Fatalf("stderr %q: want one line naming -pue", s)
	}
	stderr.Reset()
	if got := run(context.Background(), []string{"-h"}, env(nil), &stdout, &stderr, app.Deps{}); got != 0 {
		t.Fatalf("-h: status %d, want 0", got)
	}
	if !strings.Contains(stderr.String(), "OTELENERGY_ADMIN_LISTEN") {
		t.Fatalf("-h:\n%s", stderr.String())
	}
	// doctor as the first argument runs the checks, whose bad argument
	// is status 2.
	stderr.Reset()
	if got := run(context.Background(), []string{"doctor", "-window", "1ms"}, env(nil), &stdout, &stderr, app.Deps{}); got != 2 || !strings.Contains(stderr.String(), "-window") {
		t.Fatalf("doctor -window 1ms: status %d, stderr %q", got, stderr.String())
	}
}

// TestRunSimulate runs the agent briefly in -simulate mode, and checks
// that without -simulate on a machine without NVML it fails, naming NVML
// and doctor, rather than falling back to simulation.
func TestRunSimulate(t *testing.T) {
	var stdout, stderr bytes.Buffer
	e := env(map[string]string{"OTEL_METRICS_EXPORTER": "none"})
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	args := []string{"-simulate", "-simulate-devices", "2", "-duration", "300ms", "-admin-listen", "127.0.0.1:0", "-log-format", "json"}
	if got := run(context.Background(), args, e, &stdout, &stderr, app.Deps{}); got != 0 {
		t.Fatalf("status %d, want 0; stderr:\n%s", got, stderr.String())
	}
	if !strings.Contains(stderr.String(), "simulated GPUs") || !strings.Contains(stderr.String(), `"exporter":"none"`) {
		t.Fatalf("no log line says the GPUs are simulated, or which exporter runs:\n%s", stderr.String())
	}
	stderr.Reset()
	if got := run(context.Background(), []string{"-duration", "1s", "-admin-listen", ""}, e, &stdout, &stderr, app.Deps{}); got == 0 {
		t.Skip("NVML is present on this machine")
	}
	if s := stderr.String(); strings.Contains(s, "simulated GPUs") || !strings.Contains(s, "NVML") || !strings.Contains(s, "doctor") ||
		!strings.Contains(s, "failed to start GPU source") {
		t.Fatalf("without NVML: %s", s)
	}
}

// TestDockerfileBuild runs the Dockerfile's build command, as the image's
// build stage runs it (in the module's directory, outside the workspace),
// so that the image's build is checked without a docker daemon.
func TestDockerfileBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent")
	}
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// The RUN line that builds, with its continuations joined.
	text := strings.ReplaceAll(string(df), "\\\n", " ")
	var cmd string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "RUN ") && strings.Contains(line, "go build") {
			cmd = line[strings.Index(line, "GOWORK=off"):]
		}
	}
	const out = "/out/otelenergy-agent"
	if cmd == "" || !strings.Contains(cmd, out) || !strings.Contains(cmd, "CGO_ENABLED=1") || !strings.Contains(cmd, "-trimpath") {
		t.Fatalf("no cgo, -trimpath go build to %s in the Dockerfile: %q", out, cmd)
	}
	bin := filepath.Join(t.TempDir(), "otelenergy-agent")
	c := exec.Command("sh", "-c", strings.Replace(cmd, out, bin, 1))
	c.Env = os.Environ()
	b, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
	if strings.Contains(string(b), "warning:") {
		t.Errorf("the build prints cgo warnings:\n%s", b)
	}
	b, err = exec.Command(bin, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(b), "-simulate") {
		t.Fatalf("the built agent's -h: %v\n%s", err, b)
	}
}

// TestVersion prints the build with -version and exits 0 without starting
// anything, and a bad -log-level exits 2 naming the flag: the agent takes
// both from internal/cli, as the proxy does.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"-version"}, env(nil), &out, &errOut, app.Deps{}); code != 0 ||
		strings.Count(out.String(), "\n") != 1 || !strings.Contains(out.String(), runtime.Version()) {
		t.Fatalf("-version: status %d, %q, %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"-log-level", "loud"}, env(nil), &out, &errOut, app.Deps{}); code != 2 || !strings.Contains(errOut.String(), "-log-level") {
		t.Fatalf("-log-level loud: status %d, %q", code, errOut.String())
	}
}
