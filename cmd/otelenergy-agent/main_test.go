package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/goleak"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/agent"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/sim"
	"github.com/otelenergy/otelenergy/otelenergy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(options) bool
		wantErr string
	}{
		{name: "defaults", check: func(o options) bool {
			return !o.simulate && o.procRoot == "/proc" && o.processInterval == time.Second && o.maxSeries == 4096 && o.adminListen == ":8081" && o.logFormat == "text"
		}},
		{name: "environment", env: map[string]string{"OTELENERGY_SIMULATE": "true", "OTELENERGY_MAX_SERIES": "12", "OTELENERGY_PROC_ROOT": "/host/proc"},
			check: func(o options) bool { return o.simulate && o.maxSeries == 12 && o.procRoot == "/host/proc" }},
		{name: "a flag wins over its variable", args: []string{"-max-series", "7"}, env: map[string]string{"OTELENERGY_MAX_SERIES": "12"},
			check: func(o options) bool { return o.maxSeries == 7 }},
		{name: "bad variable", env: map[string]string{"OTELENERGY_PROCESS_INTERVAL": "soon"}, wantErr: "OTELENERGY_PROCESS_INTERVAL"},
		{name: "bad flag", args: []string{"-max-series", "many"}, wantErr: "-max-series"},
		{name: "too short an interval", args: []string{"-process-interval", "1ms"}, wantErr: "-process-interval"},
		{name: "no series", args: []string{"-max-series", "0"}, wantErr: "-max-series"},
		{name: "log format", args: []string{"-log-format", "xml"}, wantErr: "-log-format"},
		{name: "admin address", args: []string{"-admin-listen", "8081"}, wantErr: "-admin-listen"},
		{name: "negative idle power", args: []string{"-idle-watts", "-3"}, wantErr: "-idle-watts"},
		{name: "stray argument", args: []string{"now"}, wantErr: "now"},
		{name: "NVML devices with -simulate", args: []string{"-simulate", "-devices", "0"}, wantErr: "-devices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := parse(tt.args, env(tt.env), &stderr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error()+stderr.String(), tt.wantErr) {
					t.Fatalf("err = %v (stderr %q), want one naming %s", err, stderr.String(), tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(o) {
				t.Fatalf("options %+v", o)
			}
		})
	}
}

func TestRunExitStatus(t *testing.T) {
	var stderr bytes.Buffer
	if got := run(context.Background(), []string{"-max-series", "x"}, env(nil), &stderr); got != 2 {
		t.Fatalf("invalid flag: status %d, want 2", got)
	}
	if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n") + 1; !strings.Contains(stderr.String(), "-max-series") {
		t.Fatalf("stderr %q (%d lines) does not name the flag", stderr.String(), lines)
	}
	stderr.Reset()
	if got := run(context.Background(), []string{"-h"}, env(nil), &stderr); got != 0 {
		t.Fatalf("-h: status %d, want 0", got)
	}
	for _, want := range []string{"-simulate", "-devices", "-proc-root", `(default "/proc")`, "-process-interval", "(default 1s)",
		"-max-series", "(default 4096)", "-log-format", "-admin-listen", `(default ":8081")`, "OTELENERGY_SIMULATE"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("-h does not show %q", want)
		}
	}
}

// TestRunSimulate runs the agent for a moment in -simulate mode, and
// checks that without -simulate on a machine without NVML it fails rather
// than falling back to simulation.
func TestRunSimulate(t *testing.T) {
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	var stderr bytes.Buffer
	args := []string{"-simulate", "-simulate-devices", "2", "-duration", "1500ms", "-admin-listen", "127.0.0.1:0", "-log-format", "json"}
	if got := run(context.Background(), args, env(nil), &stderr); got != 0 {
		t.Fatalf("status %d, want 0; stderr:\n%s", got, stderr.String())
	}
	if !strings.Contains(stderr.String(), "simulated GPUs") {
		t.Fatalf("no log line says the GPUs are simulated:\n%s", stderr.String())
	}
	stderr.Reset()
	if got := run(context.Background(), []string{"-duration", "1s", "-admin-listen", ""}, env(nil), &stderr); got == 0 {
		t.Skip("NVML is present on this machine")
	}
	if strings.Contains(stderr.String(), "simulated GPUs") || !strings.Contains(stderr.String(), "NVML") {
		t.Fatalf("without NVML: %s", stderr.String())
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
	if b, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
	b, err := exec.Command(bin, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(b), "-simulate") {
		t.Fatalf("the built agent's -h: %v\n%s", err, b)
	}
}

func TestAdminEndpoints(t *testing.T) {
	nd, err := sim.New(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider()
	defer mp.Shutdown(context.Background())
	mon, err := otelenergy.NewMonitor(nd, otelenergy.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Shutdown(context.Background())
	ag, err := agent.New(agent.Config{Rings: mon, Lister: nd, Resolver: nd, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Shutdown()
	h := adminHandler(ag)
	get := func(path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	if c := get("/healthz"); c != http.StatusOK {
		t.Errorf("/healthz = %d", c)
	}
	if c := get("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz before a pass = %d, want 503", c)
	}
	mon.Sample()
	ag.Pass()
	if c := get("/readyz"); c != http.StatusOK {
		t.Errorf("/readyz after a pass = %d, want 200", c)
	}
}
