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
		c.Horizon != 10*time.Second || c.BaggageValues != 100 || c.MaxRequestBytes != 32<<20 || len(c.Command) != 0 {
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
