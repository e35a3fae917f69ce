package flags

import (
	"errors"
	"io"
	"slices"
	"testing"
	"time"
)

func noEnv(string) string { return "" }

func TestDefaults(t *testing.T) {
	c, err := Parse(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != DefaultListen || c.AdminListen != DefaultAdminListen || c.Backend.String() != DefaultBackend ||
		!c.Trailers || !c.IncludeUsage || c.Simulate || c.LogFormat != "text" || c.DrainTimeout != 25*time.Second ||
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
