package flags_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
)

func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(flags.Config) bool
		wantErr string
	}{
		{name: "defaults", check: func(c flags.Config) bool {
			return !c.Simulate && c.ProcRoot == "/proc" && c.ProcessInterval == time.Second && c.MaxSeries == 4096 &&
				c.AdminListen == ":8090" && c.LogFormat == "text" && c.LogLevel == "info" && c.SampleInterval == 17*time.Millisecond &&
				c.SampleHold == 2*time.Second
		}},
		{name: "sample hold", env: map[string]string{"OTELENERGY_SAMPLE_HOLD": "500ms"},
			check: func(c flags.Config) bool { return c.SampleHold == 500*time.Millisecond }},
		{name: "no sample hold", args: []string{"-sample-hold", "0s"},
			check: func(c flags.Config) bool { return c.SampleHold < 0 }},
		{name: "negative sample hold", args: []string{"-sample-hold", "-1s"}, wantErr: "-sample-hold"},
		{name: "too long a sample hold", args: []string{"-sample-hold", "2m"}, wantErr: "-sample-hold"},
		{name: "environment", env: map[string]string{"OTELENERGY_SIMULATE": "true", "OTELENERGY_MAX_SERIES": "12", "OTELENERGY_PROC_ROOT": "/host/proc"},
			check: func(c flags.Config) bool { return c.Simulate && c.MaxSeries == 12 && c.ProcRoot == "/host/proc" }},
		{name: "a flag wins over its variable", args: []string{"-max-series", "7"}, env: map[string]string{"OTELENERGY_MAX_SERIES": "12"},
			check: func(c flags.Config) bool { return c.MaxSeries == 7 }},
		{name: "an empty variable disables the admin server", env: map[string]string{"OTELENERGY_ADMIN_LISTEN": ""},
			check: func(c flags.Config) bool { return c.AdminListen == "" }},
		{name: "devices", args: []string{"-devices", "0, GPU-abc"}, check: func(c flags.Config) bool {
			return len(c.Devices) == 2 && c.Devices[1] == "GPU-abc"
		}},
		{name: "bad variable", env: map[string]string{"OTELENERGY_PROCESS_INTERVAL": "soon"}, wantErr: "OTELENERGY_PROCESS_INTERVAL"},
		{name: "bad flag", args: []string{"-max-series", "many"}, wantErr: "-max-series"},
		{name: "too short an interval", args: []string{"-process-interval", "1ms"}, wantErr: "-process-interval"},
		{name: "too short a sample interval", args: []string{"-sample-interval", "5ms"}, wantErr: "-sample-interval"},
		{name: "no series", args: []string{"-max-series", "0"}, wantErr: "-max-series"},
		{name: "log format", args: []string{"-log-format", "xml"}, wantErr: "-log-format"},
		{name: "log level", args: []string{"-log-level", "loud"}, wantErr: "-log-level"},
		{name: "admin address", args: []string{"-admin-listen", "8090"}, wantErr: "-admin-listen"},
		{name: "negative idle power", args: []string{"-idle-watts", "-3"}, wantErr: "-idle-watts"},
		{name: "NaN idle power", args: []string{"-idle-watts", "NaN"}, wantErr: "-idle-watts"},
		{name: "simulated boards", args: []string{"-simulate-devices", "65"}, wantErr: "-simulate-devices"},
		{name: "negative duration", args: []string{"-duration", "-1s"}, wantErr: "-duration"},
		{name: "stray argument", args: []string{"now"}, wantErr: "now"},
		{name: "NVML devices with -simulate", args: []string{"-simulate", "-devices", "0"}, wantErr: "-devices"},
		{name: "sources by default", check: func(c flags.Config) bool { return c.Sources == nil && c.SysRoot == "/sys" }},
		{name: "sources", args: []string{"-sources", "amdsmi,intel,rapl"}, env: map[string]string{"OTELENERGY_SYS_ROOT": "/host/sys"},
			check: func(c flags.Config) bool {
				return strings.Join(c.Sources, ",") == "amdsmi,intel-hwmon,rapl" && c.SysRoot == "/host/sys"
			}},
		{name: "sources from the environment", env: map[string]string{"OTELENERGY_SOURCES": "nvml"},
			check: func(c flags.Config) bool { return strings.Join(c.Sources, ",") == "nvml" }},
		{name: "unknown source", args: []string{"-sources", "nvml,tpu"}, wantErr: "-sources"},
		{name: "rapl alone", args: []string{"-sources", "rapl"}, wantErr: "-sources"},
		{name: "sources with -simulate", args: []string{"-simulate", "-sources", "nvml"}, wantErr: "-sources"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			c, err := flags.Parse(tt.args, env(tt.env), &out)
			if tt.wantErr != "" {
				if !errors.Is(err, flags.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err = %v, want one line wrapping ErrInvalid naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Fatalf("config %+v", c)
			}
		})
	}
}

// TestUsage checks that -h documents every flag with its default and its
// variable.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if _, err := flags.Parse([]string{"-h"}, env(nil), &out); !errors.Is(err, flags.ErrHelp) {
		t.Fatalf("-h: %v, want ErrHelp", err)
	}
	for _, name := range flags.Names() {
		if !strings.Contains(out.String(), "-"+name) || !strings.Contains(out.String(), flags.Env(name)) {
			t.Errorf("-h does not show -%s and %s", name, flags.Env(name))
		}
	}
	for _, want := range []string{`(default /proc;`, "(default 1s;", "(default 4096;", "(default :8090;", "doctor"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h does not show %q", want)
		}
	}
}

// TestCarbonFlags: the carbon flags and their variables are in the
// table, checked together, and a bad value is one line naming the flag
// that matches both ErrInvalid and carbon.ErrInvalidConfig.
func TestCarbonFlags(t *testing.T) {
	c, err := flags.Parse([]string{"-carbon-provider", "watttime", "-carbon-zone", "CAISO_NORTH", "-carbon-user", "me", "-carbon-intensity", "300"},
		env(map[string]string{"OTELENERGY_CARBON_TOKEN": "pw", "OTELENERGY_PUE": "1.1"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Carbon.Enabled() || c.Carbon.Provider != "watttime" || c.Carbon.User != "me" || c.Carbon.PUE != 1_100_000 || c.Carbon.Intensity != 300_000 {
		t.Fatalf("carbon %+v", c.Carbon)
	}
	for _, args := range [][]string{
		{"-carbon-intensity", "x"},
		{"-carbon-provider", "watttime", "-carbon-zone", "CAISO_NORTH"}, // no user, no password
		{"-pue", "1.2"}, // carbon off
		{"-carbon-provider", "electricitymaps", "-carbon-zone", "DE", "-carbon-token-file", "/nonexistent/otelenergy-token"}, // exit 2, not a failed start
	} {
		_, err := flags.Parse(args, env(nil), nil)
		if !errors.Is(err, flags.ErrInvalid) || !errors.Is(err, carbon.ErrInvalidConfig) || strings.Contains(err.Error(), "\n") ||
			!strings.Contains(err.Error(), "-carbon-") && !strings.Contains(err.Error(), "-pue") {
			t.Errorf("%q: %v, want one line naming the flag, matching ErrInvalid and carbon.ErrInvalidConfig", args, err)
		}
	}
}
