package carbonconf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/internal/cli"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type binConfig struct{ Carbon Config }

var table = cli.Table[binConfig]{Program: "t", EnvPrefix: "OTELENERGY_",
	Flags: Flags(func(c *binConfig) *Config { return &c.Carbon })}

// parse parses args over env as a binary does: the table, then Check.
func parse(args []string, env map[string]string) (Config, error) {
	var c binConfig
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if _, err := table.Parse(&c, args, lookup); err != nil {
		return c.Carbon, err
	}
	return c.Carbon, c.Carbon.Check(func(k string) string { return env[k] })
}

func TestDefaultsOff(t *testing.T) {
	c, err := parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Enabled() || c.PUE != carbon.PUENone || c.Embodied != 0 || c.PollInterval != carbon.DefaultPollInterval || c.StaleAfter != carbon.DefaultStaleAfter {
		t.Fatalf("defaults %+v", c)
	}
	cb, err := Build(c)
	if cb != nil || err != nil {
		t.Fatalf("carbon off built %v, %v", cb, err)
	}
	// A nil *Carbon does nothing.
	if err := cb.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cb.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := cb.Age(); ok {
		t.Fatal("a nil Carbon has an age")
	}
}

// TestStatic: -carbon-intensity 436 -pue 1.135 converts 1 kWh into
// 436 g × 1.135 = 494.86 g, exactly, and embodied emissions by device
// time: 12.5 g per device-hour over 36 s is 0.125 g.
func TestStatic(t *testing.T) {
	c, err := parse([]string{"-carbon-intensity", "436", "-pue", "1.135", "-embodied-g-per-hour", "12.5"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	if cb.Poller != nil {
		t.Fatal("a static intensity has a poller")
	}
	ug, ok := cb.Model.Estimate(3_600_000_000) // 1 kWh in mJ
	if !ok || ug != 494_860_000 {
		t.Fatalf("1 kWh: %d µg (%v), want 494 860 000", ug, ok)
	}
	cb.Model.Note(0)
	var op, emb [1]uint64
	res := cb.Model.Interval(0, int64(36*time.Second), []uint64{0}, 0, []uint64{uint64(36 * time.Second)}, op[:], emb[:])
	if emb[0] != 125_000 || res.EmbodiedRest != 0 {
		t.Fatalf("embodied over 36 s: %d µg, rest %d; want 125 000 and 0", emb[0], res.EmbodiedRest)
	}
	if r := cb.Model.Current(); r == nil || r.Source != carbon.SourceStatic || r.Kind != carbon.Average || r.MgPerKWh != 436_000 {
		t.Fatalf("reading %+v", r)
	}
	var log bytes.Buffer
	cb.Log(slog.New(slog.NewTextHandler(&log, nil)))
	for _, want := range []string{"source=static", "kind=average", "g_per_kwh=436", "pue=1.135", "embodied_g_per_hour=12.5"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log line %q lacks %q", log.String(), want)
		}
	}
	if strings.Count(log.String(), "\n") != 1 {
		t.Errorf("want one log line: %q", log.String())
	}
}

// TestInvalid: every bad value, alone or with others, is one line that
// names the flag and matches cli.ErrInvalid and carbon.ErrInvalidConfig.
func TestInvalid(t *testing.T) {
	tok := map[string]string{TokenEnv: "x"}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string // in the message
	}{
		{name: "intensity", args: []string{"-carbon-intensity", "lots"}, want: "-carbon-intensity"},
		{name: "intensity variable", env: map[string]string{"OTELENERGY_CARBON_INTENSITY": "-3"}, want: "OTELENERGY_CARBON_INTENSITY"},
		{name: "pue below 1", args: []string{"-carbon-intensity", "100", "-pue", "0.9"}, want: "-pue"},
		{name: "embodied", args: []string{"-carbon-intensity", "100", "-embodied-g-per-hour", "x"}, want: "-embodied-g-per-hour"},
		{name: "provider", args: []string{"-carbon-provider", "co2signal"}, want: "-carbon-provider"},
		{name: "poll too fast", args: []string{"-carbon-poll-interval", "10ms"}, want: "-carbon-poll-interval"},
		{name: "stale", args: []string{"-carbon-stale-after", "0s"}, want: "-carbon-stale-after"},
		{name: "pue without carbon", args: []string{"-pue", "1.2"}, want: "-pue"},
		{name: "embodied without carbon", args: []string{"-embodied-g-per-hour", "3"}, want: "-embodied-g-per-hour"},
		{name: "zone without provider", args: []string{"-carbon-intensity", "100", "-carbon-zone", "DE"}, want: "-carbon-zone"},
		{name: "poll without provider", args: []string{"-carbon-intensity", "100", "-carbon-poll-interval", "1m"}, want: "-carbon-poll-interval"},
		{name: "provider without zone", args: []string{"-carbon-provider", "electricitymaps"}, env: tok, want: "-carbon-zone"},
		{name: "no token", args: []string{"-carbon-provider", "electricitymaps", "-carbon-zone", "DE"}, want: TokenEnv},
		{name: "two tokens", args: []string{"-carbon-provider", "electricitymaps", "-carbon-zone", "DE", "-carbon-token-file", "/t"}, env: tok, want: "-carbon-token-file"},
		{name: "watttime without user", args: []string{"-carbon-provider", "watttime", "-carbon-zone", "CAISO_NORTH"}, env: tok, want: "-carbon-user"},
		{name: "user with electricitymaps", args: []string{"-carbon-provider", "electricitymaps", "-carbon-zone", "DE", "-carbon-user", "me"}, env: tok, want: "-carbon-user"},
		{name: "location out of range", args: []string{"-carbon-provider", "electricitymaps", "-carbon-zone", "91,0"}, env: tok, want: "-carbon-zone"},
		{name: "ukgrid zone", args: []string{"-carbon-provider", "ukgrid", "-carbon-zone", "DE"}, want: "-carbon-zone"},
		{name: "ukgrid token", args: []string{"-carbon-provider", "ukgrid", "-carbon-zone", "GB", "-carbon-token-file", "/t"}, want: "-carbon-token-file"},
		{name: "stale not above poll", args: []string{"-carbon-provider", "ukgrid", "-carbon-zone", "GB", "-carbon-poll-interval", "1h", "-carbon-stale-after", "1h"}, want: "-carbon-stale-after"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(c.args, c.env)
			if !errors.Is(err, cli.ErrInvalid) || !errors.Is(err, carbon.ErrInvalidConfig) {
				t.Fatalf("%v: want an error matching cli.ErrInvalid and carbon.ErrInvalidConfig", err)
			}
			if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Fatalf("%q: want one line naming %s", msg, c.want)
			}
		})
	}
}

func TestValidProviders(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"-carbon-provider", "ukgrid", "-carbon-zone", "13"}},
		{args: []string{"-carbon-provider", "electricitymaps", "-carbon-zone", "DE", "-carbon-intensity", "380"}, env: map[string]string{TokenEnv: "x"}},
		{args: []string{"-carbon-provider", "watttime", "-carbon-zone", "CAISO_NORTH", "-carbon-user", "me", "-carbon-token-file", "/run/secrets/wt"}},
		{env: map[string]string{"OTELENERGY_CARBON_PROVIDER": "ukgrid", "OTELENERGY_CARBON_ZONE": "GB", "OTELENERGY_CARBON_POLL_INTERVAL": "1m", "OTELENERGY_CARBON_STALE_AFTER": "10m"}},
	} {
		c2, err := parse(c.args, c.env)
		if err != nil || !c2.Enabled() {
			t.Errorf("%q %v: %v, enabled %v", c.args, c.env, err, c2.Enabled())
		}
	}
}

// fakeEM is an Electricity Maps server on 127.0.0.1 that answers in the
// API's documented shape with the intensity in g, and records the token
// it was sent.
func fakeEM(t *testing.T, g *atomic.Int64) (*httptest.Server, *atomic.Value) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("auth-token"))
		if r.URL.Path != "/carbon-intensity/latest" || r.URL.Query().Get("zone") != "DE" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"zone":"DE","carbonIntensity":%d,"datetime":"%s","updatedAt":"%s","emissionFactorType":"lifecycle","isEstimated":false}`,
			g.Load(), time.Now().UTC().Truncate(time.Hour).Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339))
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

// TestProviderFromTokenFile: the secret comes from -carbon-token-file,
// reaches the provider, and is in no log line or error; the poller's
// figure is the provider's until it answers, the fallback before.
func TestProviderFromTokenFile(t *testing.T) {
	const secret = "s3cr3t-token-value"
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var g atomic.Int64
	g.Store(380)
	srv, got := fakeEM(t, &g)
	c, err := parse([]string{"-carbon-provider", "electricitymaps", "-carbon-zone", "DE", "-carbon-token-file", path,
		"-carbon-intensity", "436", "-carbon-poll-interval", "1s", "-carbon-stale-after", "1h"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := Build(c, carbon.WithBaseURL(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if r := cb.Model.Current(); r == nil || !r.Fallback || r.MgPerKWh != 436_000 {
		t.Fatalf("before the first answer: %+v, want the fallback 436 g/kWh", r)
	}
	var log bytes.Buffer
	cb.Log(slog.New(slog.NewTextHandler(&log, nil)))
	for _, want := range []string{"source=electricitymaps", "zone=DE", "kind=average", "pue=1", `fallback="436 g/kWh"`, "poll_interval=1s"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log line %q lacks %q", log.String(), want)
		}
	}
	if err := cb.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r := cb.Model.Current(); r != nil && !r.Fallback {
			if r.MgPerKWh != 380_000 || r.Source != carbon.SourceElectricityMaps || r.Zone != "DE" {
				t.Fatalf("provider's reading %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no answer from the fake provider in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if age, ok := cb.Age(); !ok || age < 0 || age > 10*time.Second {
		t.Fatalf("age %v %v", age, ok)
	}
	if err := cb.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got.Load() != secret {
		t.Fatalf("the provider was sent token %q", got.Load())
	}
	if strings.Contains(log.String(), secret) || strings.Contains(fmt.Sprintf("%+v %#v", cb, c), secret) {
		t.Fatal("the secret is in a log line or a print")
	}
}

// TestSecretErrors: a missing file or variable fails the build with an
// error naming the flag or the variable, never the secret.
func TestSecretErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(TokenEnv, "")
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing file", Config{Provider: ProviderElectricityMaps, Zone: "DE", TokenFile: filepath.Join(dir, "nope"), PUE: carbon.PUENone, PollInterval: time.Minute, StaleAfter: time.Hour}, "-carbon-token-file"},
		{"empty file", Config{Provider: ProviderWattTime, Zone: "CAISO_NORTH", User: "me", TokenFile: empty, PUE: carbon.PUENone, PollInterval: time.Minute, StaleAfter: time.Hour}, "-carbon-token-file"},
		{"unset variable", Config{Provider: ProviderElectricityMaps, Zone: "DE", PUE: carbon.PUENone, PollInterval: time.Minute, StaleAfter: time.Hour}, TokenEnv},
	} {
		t.Run(c.name, func(t *testing.T) {
			cb, err := Build(c.cfg)
			if cb != nil || !errors.Is(err, carbon.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, %v: want an error naming %s", cb, err, c.want)
			}
		})
	}
}

// TestTokenFromEnv: with no file, the secret is the variable's.
func TestTokenFromEnv(t *testing.T) {
	const secret = "env-secret-42"
	t.Setenv(TokenEnv, secret)
	var g atomic.Int64
	g.Store(52)
	srv, got := fakeEM(t, &g)
	c, err := parse([]string{"-carbon-provider", "electricitymaps", "-carbon-zone", "DE"}, map[string]string{TokenEnv: secret})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := Build(c, carbon.WithBaseURL(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if r := cb.Model.Current(); r != nil {
		t.Fatalf("no fallback, no answer yet: %+v, want none", r)
	}
	if err := cb.Poller.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := cb.Model.Current(); r == nil || r.MgPerKWh != 52_000 || got.Load() != secret {
		t.Fatalf("reading %+v, token sent %q", r, got.Load())
	}
}

// TestElectricityMapsAtLocation: a zone given as lat,lon asks Electricity
// Maps by coordinates, and the figure's zone is the one it answers.
func TestElectricityMapsAtLocation(t *testing.T) {
	t.Setenv(TokenEnv, "tok")
	var query atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query.Store(r.URL.RawQuery)
		fmt.Fprintf(w, `{"zone":"DE","carbonIntensity":310,"datetime":"%s"}`, time.Now().UTC().Truncate(time.Hour).Format(time.RFC3339))
	}))
	defer srv.Close()
	c, err := parse([]string{"-carbon-provider", "electricitymaps", "-carbon-zone", "48.1, 11.6"}, map[string]string{TokenEnv: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := Build(c, carbon.WithBaseURL(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.Poller.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := cb.Model.Current(); r == nil || r.Zone != "DE" || r.MgPerKWh != 310_000 || query.Load() != "lat=48.1&lon=11.6" {
		t.Fatalf("reading %+v, query %v", r, query.Load())
	}
	c.Zone = "91,0" // no such latitude
	if _, err := Build(c, carbon.WithBaseURL(srv.URL)); !errors.Is(err, carbon.ErrInvalidConfig) || !strings.Contains(err.Error(), "-carbon-provider") {
		t.Fatalf("latitude 91: %v", err)
	}
}
