package flags

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/carbon"
)

func noEnv(string) string { return "" }

func TestDefaults(t *testing.T) {
	c, err := Parse(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != DefaultListen || c.AdminListen != DefaultAdminListen || c.Backend.String() != DefaultBackend ||
		!c.Trailers || !c.IncludeUsage || !c.UpstreamStream || c.MaxResponseBytes != 16<<20 || c.Simulate || c.LogFormat != "text" || c.DrainTimeout != 25*time.Second ||
		c.Horizon != 10*time.Second || c.BaggageValues != 100 || c.MaxRequestBytes != 16<<20 || c.MaxBufferedBytes != 64<<20 ||
		c.ShutdownDelay != 5*time.Second || len(c.Command) != 0 {
		t.Fatalf("defaults %+v", c)
	}
}

func TestCommandAfterDashDash(t *testing.T) {
	c, err := Parse([]string{"-simulate", "--", "vllm", "serve", "m", "--port", "8001"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Simulate || !slices.Equal(c.Command, []string{"vllm", "serve", "m", "--port", "8001"}) {
		t.Fatalf("%+v", c)
	}
}

// TestDefaultPortsApart keeps the proxy's default ports off the demo
// backend's :8080, the backends' usual :8000 and the agent's admin :8090.
func TestDefaultPortsApart(t *testing.T) {
	taken := map[string]bool{":8000": true, ":8080": true, ":8090": true}
	if DefaultListen == DefaultAdminListen || taken[DefaultListen] || taken[DefaultAdminListen] {
		t.Fatalf("defaults %s and %s collide with each other or with %v", DefaultListen, DefaultAdminListen, taken)
	}
}

// TestDashDashWithoutCommand checks that a "--" with nothing after it is
// an error, not front mode.
func TestDashDashWithoutCommand(t *testing.T) {
	for _, args := range [][]string{{"--"}, {"-simulate", "--"}} {
		if _, err := Parse(args, noEnv, io.Discard); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", args, err)
		}
	}
	if c, err := Parse([]string{"-simulate"}, noEnv, io.Discard); err != nil || len(c.Command) != 0 {
		t.Fatalf("front mode: %+v %v", c, err)
	}
}

func TestRequestAboveBuffered(t *testing.T) {
	_, err := Parse([]string{"-max-request-bytes", "2000", "-max-buffered-bytes", "1000"}, noEnv, io.Discard)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("a request limit above the memory bound: %v", err)
	}
}

func TestUpstreamStreamOff(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{{args: []string{"-upstream-stream=false"}}, {env: map[string]string{Env("upstream-stream"): "false"}}} {
		got, err := Parse(c.args, func(k string) string { return c.env[k] }, io.Discard)
		if err != nil || got.UpstreamStream {
			t.Fatalf("%v %v: upstream streaming %t, %v; want off", c.args, c.env, got.UpstreamStream, err)
		}
	}
}

func TestEnvBoolAndPrecedence(t *testing.T) {
	env := map[string]string{Env("simulate"): "true", Env("trailers"): "false", Env("listen"): ":9000"}
	c, err := Parse([]string{"-listen", ":9100"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Simulate || c.Trailers || c.Listen != ":9100" {
		t.Fatalf("%+v: want the variables for -simulate and -trailers, the flag for -listen", c)
	}
	env[Env("simulate")] = "maybe"
	if _, err := Parse(nil, func(k string) string { return env[k] }, io.Discard); !errors.Is(err, ErrInvalid) {
		t.Fatalf("OTELENERGY_SIMULATE=maybe: %v", err)
	}
}

func TestHelp(t *testing.T) {
	if _, err := Parse([]string{"-h"}, noEnv, io.Discard); !errors.Is(err, ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

// TestTrailersFinal: -trailers takes true, false and final (the bare
// flag is true), -final-wait defaults to 500ms, both from flags or
// variables, and -h shows both.
func TestTrailersFinal(t *testing.T) {
	for _, c := range []struct {
		args        []string
		env         map[string]string
		on, final   bool
		wait        time.Duration
		wantInvalid bool
	}{
		{args: nil, on: true, wait: 500 * time.Millisecond},
		{args: []string{"-trailers"}, on: true, wait: 500 * time.Millisecond},
		{args: []string{"-trailers=false"}, wait: 500 * time.Millisecond},
		{args: []string{"-trailers=final"}, on: true, final: true, wait: 500 * time.Millisecond},
		{args: []string{"-trailers=final", "-final-wait", "2s"}, on: true, final: true, wait: 2 * time.Second},
		{env: map[string]string{"OTELENERGY_TRAILERS": "final", "OTELENERGY_FINAL_WAIT": "250ms"}, on: true, final: true, wait: 250 * time.Millisecond},
		{env: map[string]string{"OTELENERGY_TRAILERS": "final"}, args: []string{"-trailers=true"}, on: true, wait: 500 * time.Millisecond},
		{args: []string{"-trailers=later"}, wantInvalid: true},
		{args: []string{"-final-wait", "0s"}, wantInvalid: true},
	} {
		cfg, err := Parse(c.args, func(k string) string { return c.env[k] }, io.Discard)
		if c.wantInvalid {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v %v: %v, want ErrInvalid", c.args, c.env, err)
			}
			continue
		}
		if err != nil || cfg.Trailers != c.on || cfg.TrailersFinal != c.final || cfg.FinalWait != c.wait {
			t.Errorf("%v %v: trailers %v final %v wait %v (%v); want %v %v %v", c.args, c.env, cfg.Trailers, cfg.TrailersFinal, cfg.FinalWait, err, c.on, c.final, c.wait)
		}
	}
	var usage strings.Builder
	Usage(&usage)
	for _, s := range []string{"-final-wait value", "OTELENERGY_FINAL_WAIT", "final holds the trailers"} {
		if !strings.Contains(usage.String(), s) {
			t.Errorf("-h does not show %q", s)
		}
	}
}

// TestCarbonFlags: the carbon flags and their variables are in the
// table, and a bad value is one line naming the flag that matches both
// ErrInvalid and carbon.ErrInvalidConfig.
func TestCarbonFlags(t *testing.T) {
	env := map[string]string{Env("carbon-intensity"): "436"}
	c, err := Parse([]string{"-pue", "1.135", "-embodied-g-per-hour", "2.5"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Carbon.Enabled() || c.Carbon.Intensity != 436_000 || c.Carbon.PUE != 1_135_000 || c.Carbon.Embodied != 2_500_000 {
		t.Fatalf("carbon %+v", c.Carbon)
	}
	if c, err := Parse(nil, noEnv, io.Discard); err != nil || c.Carbon.Enabled() {
		t.Fatalf("carbon is on by default: %+v %v", c.Carbon, err)
	}
	for _, args := range [][]string{
		{"-carbon-intensity", "436g"},
		{"-carbon-intensity", "436", "-pue", "0.5"},
		{"-carbon-provider", "electricitymaps", "-carbon-zone", "DE"}, // no token
		{"-carbon-provider", "electricitymaps", "-carbon-zone", "DE", "-carbon-token-file", "/nonexistent/otelenergy-token"}, // exit 2, not a failed start
	} {
		_, err := Parse(args, noEnv, io.Discard)
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, carbon.ErrInvalidConfig) || strings.Contains(err.Error(), "\n") ||
			!strings.Contains(err.Error(), "-carbon-") && !strings.Contains(err.Error(), "-pue") {
			t.Errorf("%q: %v, want one line naming the flag, matching ErrInvalid and carbon.ErrInvalidConfig", args, err)
		}
	}
	for _, name := range []string{"carbon-intensity", "carbon-provider", "carbon-zone", "pue", "embodied-g-per-hour",
		"carbon-token-file", "carbon-user", "carbon-poll-interval", "carbon-stale-after"} {
		if !slices.Contains(Names(), name) {
			t.Errorf("no -%s", name)
		}
	}
	if slices.Contains(Names(), "carbon-token") {
		t.Error("a flag takes the secret")
	}
}

// TestSources: -sources chooses the accelerators, and rapl, in any place,
// adds the host's share.
func TestSources(t *testing.T) {
	c, err := Parse(nil, noEnv, io.Discard)
	if err != nil || c.Sources != nil {
		t.Fatalf("default -sources: %v, %v; want nil (auto)", c.Sources, err)
	}
	env := map[string]string{Env("sources"): "amdsmi,intel"}
	c, err = Parse(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil || strings.Join(c.Sources, ",") != "amdsmi,intel-hwmon" {
		t.Fatalf("OTELENERGY_SOURCES=amdsmi,intel: %v, %v", c.Sources, err)
	}
	for _, c := range []struct {
		v, accel string
		host     bool
	}{{"auto", "", false}, {"rapl", "", true}, {"nvml,rapl", "nvml", true}, {"rapl,amdsmi", "amdsmi", true}, {"intel", "intel-hwmon", false}} {
		got, err := Parse([]string{"-sources", c.v}, noEnv, io.Discard)
		if err != nil || strings.Join(got.Sources, ",") != c.accel || got.Host != c.host {
			t.Errorf("-sources %s: accelerators %q, host %t, %v; want %q, %t", c.v, got.Sources, got.Host, err, c.accel, c.host)
		}
	}
	for _, bad := range []string{"tpu", "nvml,nvml", "rapl,rapl", "auto,rapl"} {
		if _, err := Parse([]string{"-sources", bad}, noEnv, io.Discard); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "-sources") {
			t.Errorf("-sources %s: %v, want ErrInvalid naming -sources", bad, err)
		}
	}
}
