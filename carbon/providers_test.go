package carbon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// providerCase builds one provider against its fake server.
type providerCase struct {
	name     string
	handler  func(*fakeServer) http.Handler
	figure   float64 // in the provider's unit
	wantMg   uint64  // the figure in mg CO2e/kWh, computed by hand
	wantKind Kind
	wantAt   time.Time
	build    func(t *testing.T, base, zone string) Provider
	zone     string // a zone the fake knows
	badZone  string // one it does not
}

func providerCases() []providerCase {
	return []providerCase{
		{
			name: "electricitymaps", handler: emHandler, figure: 302,
			wantMg: 302_000, wantKind: Average,
			wantAt: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC),
			zone:   "DE", badZone: "XX",
			build: func(t *testing.T, base, zone string) Provider {
				p, err := NewElectricityMaps(zone, testSecret(t, testToken), WithBaseURL(base))
				if err != nil {
					t.Fatal(err)
				}
				return p
			},
		},
		{
			// 850.5 lbs/MWh × 453.59237 g/lb ÷ 1000 kWh/MWh = 385.780310685 g/kWh.
			name: "watttime", handler: wtHandler, figure: 850.5,
			wantMg: 385_780, wantKind: Marginal,
			wantAt: time.Date(2026, 12, 1, 11, 5, 0, 0, time.UTC),
			zone:   "CAISO_NORTH", badZone: "NOWHERE",
			build: func(t *testing.T, base, zone string) Provider {
				p, err := NewWattTime(zone, testUser, testSecret(t, testPassword), WithBaseURL(base))
				if err != nil {
					t.Fatal(err)
				}
				return p
			},
		},
		{
			name: "ukgrid", handler: ukHandler, figure: 263,
			wantMg: 263_000, wantKind: Average, // national: the actual, not the forecast (268)
			wantAt: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC),
			zone:   "GB", badZone: "99",
			build: func(t *testing.T, base, zone string) Provider {
				p, err := NewUKGrid(zone, WithBaseURL(base))
				if err != nil {
					t.Fatal(err)
				}
				return p
			},
		},
	}
}

// TestProviderFaults runs every provider against its fake server in each
// fault mode: a normal answer, 429 with Retry-After, 500, a slow answer,
// malformed JSON, JSON without the figure, and a zone it does not know.
func TestProviderFaults(t *testing.T) {
	for _, pc := range providerCases() {
		t.Run(pc.name, func(t *testing.T) {
			f := newFake(t, pc.handler, pc.figure)
			p := pc.build(t, f.URL, pc.zone)

			tests := []struct {
				name    string
				fault   fault
				zone    string
				timeout time.Duration
				want    error
			}{
				{name: "normal", fault: faultNone},
				{name: "429", fault: faultRateLimited, want: ErrRateLimited},
				{name: "500", fault: faultServer, want: ErrServer},
				{name: "503", fault: faultUnavailable, want: ErrServer},
				{name: "slow", fault: faultSlow, timeout: 100 * time.Millisecond, want: ErrTimeout},
				{name: "malformed", fault: faultMalformed, want: ErrMalformed},
				{name: "no figure", fault: faultWrongShape, want: ErrMalformed},
				{name: "longer than the limit", fault: faultOversized, want: ErrMalformed},
				{name: "unknown zone", fault: faultNone, zone: pc.badZone, want: ErrUnknownZone},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					f.fault.Store(int32(tt.fault))
					prov := p
					if tt.zone != "" {
						prov = pc.build(t, f.URL, tt.zone)
					}
					timeout := tt.timeout
					if timeout == 0 {
						timeout = 5 * time.Second
					}
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					defer cancel()
					began := time.Now()
					it, err := prov.Intensity(ctx)
					took := time.Since(began)
					if tt.want == nil {
						if err != nil {
							t.Fatalf("Intensity: %v", err)
						}
						want := Intensity{MgPerKWh: pc.wantMg, Kind: pc.wantKind, Source: pc.name, Zone: pc.zone, At: pc.wantAt}
						if pc.name == "ukgrid" {
							want.Source = SourceUKGrid
						}
						if !it.At.Equal(want.At) {
							t.Errorf("At = %v, want %v", it.At, want.At)
						}
						it.At, want.At = time.Time{}, time.Time{}
						if it != want {
							t.Errorf("Intensity = %+v, want %+v", it, want)
						}
						return
					}
					if !errors.Is(err, tt.want) {
						t.Fatalf("err = %v, want errors.Is %v", err, tt.want)
					}
					for _, s := range []string{testToken, testPassword, wtToken} {
						if strings.Contains(err.Error(), s) {
							t.Errorf("error %q carries a secret", err)
						}
					}
					switch tt.want {
					case ErrRateLimited:
						var se *StatusError
						if !errors.As(err, &se) || se.RetryAfter != 7*time.Second || se.Status != 429 {
							t.Errorf("err = %#v, want a StatusError 429 with RetryAfter 7s", err)
						}
					case ErrServer:
						var se *StatusError
						wantWait := time.Duration(0)
						if tt.fault == faultUnavailable {
							wantWait = 11 * time.Second // a 503's Retry-After counts too
						}
						if !errors.As(err, &se) || se.RetryAfter != wantWait {
							t.Errorf("err = %#v, want a StatusError with RetryAfter %v", err, wantWait)
						}
					case ErrTimeout:
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("err = %v, want it to match context.DeadlineExceeded too", err)
						}
						if took > 2*time.Second {
							t.Errorf("a slow answer held Intensity %v past its 100ms deadline", took)
						}
					}
				})
			}
		})
	}
}

// TestUKGridRegional reads a region's forecast (regional figures have no
// actual).
func TestUKGridRegional(t *testing.T) {
	f := newFake(t, ukHandler, 120)
	for _, zone := range []string{"13", "013", " 13 "} {
		p, err := NewUKGrid(zone, WithBaseURL(f.URL))
		if err != nil {
			t.Fatal(err)
		}
		it, err := p.Intensity(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if it.MgPerKWh != 125_000 || it.Zone != "13" || it.Kind != Average {
			t.Errorf("zone %q: Intensity = %+v, want the forecast 125 g/kWh for region 13", zone, it)
		}
	}
	p, err := NewUKGrid("gb", WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	if it, err := p.Intensity(context.Background()); err != nil || it.Zone != "GB" || it.MgPerKWh != 120_000 {
		t.Errorf("zone gb: %+v, %v; want GB's actual 120 g/kWh", it, err)
	}
}

// TestProviderUnauthorized: a wrong token or password is ErrUnauthorized,
// and the error does not carry it.
func TestProviderUnauthorized(t *testing.T) {
	const wrong = "wrong-credential-SECRET"
	em := newFake(t, emHandler, 300)
	wt := newFake(t, wtHandler, 300)
	pe, err := NewElectricityMaps("DE", testSecret(t, wrong), WithBaseURL(em.URL))
	if err != nil {
		t.Fatal(err)
	}
	pw, err := NewWattTime("CAISO_NORTH", testUser, testSecret(t, wrong), WithBaseURL(wt.URL))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Provider{pe, pw} {
		_, err := p.Intensity(context.Background())
		if !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%T: err = %v, want ErrUnauthorized", p, err)
		}
		if err != nil && strings.Contains(err.Error(), wrong) {
			t.Errorf("%T: error %q carries the secret", p, err)
		}
	}
}

// TestWattTimeRelogin: the token is reused within its life, renewed after
// it, and renewed once when the API answers 401 (expired early).
func TestWattTimeRelogin(t *testing.T) {
	f := newFake(t, wtHandler, 1000)
	now := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	p, err := NewWattTime("CAISO_NORTH", testUser, testSecret(t, testPassword), WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	p.c.now = func() time.Time { return now }
	steps := []struct {
		name       string
		advance    time.Duration
		expire     bool
		wantLogins int64
	}{
		{name: "first fetch logs in", wantLogins: 1},
		{name: "within the token's life", advance: 10 * time.Minute, wantLogins: 1},
		{name: "past 25 minutes", advance: 16 * time.Minute, wantLogins: 2},
		{name: "a 401 logs in once more", advance: time.Minute, expire: true, wantLogins: 3},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		f.expireNext.Store(s.expire)
		it, err := p.Intensity(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		// 1000 lbs/MWh = 453.59237 g/kWh.
		if it.MgPerKWh != 453_592 {
			t.Errorf("%s: MgPerKWh = %d, want 453592", s.name, it.MgPerKWh)
		}
		if got := f.logins.Load(); got != s.wantLogins {
			t.Errorf("%s: logins = %d, want %d", s.name, got, s.wantLogins)
		}
	}
}

// TestSecretNeverPrinted: a secret read from the environment or a file
// does not show in any print of it or of a provider that holds it.
func TestSecretNeverPrinted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := SecretFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fromFile.value() != testToken {
		t.Fatalf("SecretFromFile did not trim the newline")
	}
	em, err := NewElectricityMaps("DE", fromFile)
	if err != nil {
		t.Fatal(err)
	}
	f := newFake(t, wtHandler, 100)
	wt, err := NewWattTime("CAISO_NORTH", testUser, testSecret(t, testPassword), WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Intensity(context.Background()); err != nil { // holds a bearer token now
		t.Fatal(err)
	}
	text, _ := fromFile.MarshalText()
	for _, s := range []string{
		fmt.Sprint(fromFile), fmt.Sprintf("%+v %#v %q", fromFile, fromFile, fromFile), string(text),
		fmt.Sprintf("%v %+v %#v", em, em, *em), fmt.Sprintf("%v %+v %#v", wt, wt, &wt),
	} {
		for _, secret := range []string{testToken, testPassword, wtToken} {
			if strings.Contains(s, secret) {
				t.Errorf("print %q shows a secret", s)
			}
		}
	}
}

func TestSecretErrors(t *testing.T) {
	t.Setenv("OTELENERGY_TEST_EMPTY", "  ")
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		get  func() (Secret, error)
	}{
		{"unset env", func() (Secret, error) { return SecretFromEnv("OTELENERGY_TEST_UNSET_VARIABLE") }},
		{"blank env", func() (Secret, error) { return SecretFromEnv("OTELENERGY_TEST_EMPTY") }},
		{"missing file", func() (Secret, error) { return SecretFromFile(filepath.Join(t.TempDir(), "none")) }},
		{"empty file", func() (Secret, error) { return SecretFromFile(empty) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.get()
			if !errors.Is(err, ErrInvalidConfig) || !s.IsZero() {
				t.Errorf("got %v, %v; want ErrInvalidConfig and a zero Secret", s, err)
			}
		})
	}
}

func TestProviderConfigErrors(t *testing.T) {
	tok := testSecret(t, testToken)
	for _, tt := range []struct {
		name string
		err  func() error
	}{
		{"em no zone", func() error { _, err := NewElectricityMaps(" ", tok); return err }},
		{"em no token", func() error { _, err := NewElectricityMaps("DE", Secret{}); return err }},
		{"em bad base", func() error { _, err := NewElectricityMaps("DE", tok, WithBaseURL("ftp://x")); return err }},
		{"wt no region", func() error { _, err := NewWattTime("", "u", tok); return err }},
		{"wt no user", func() error { _, err := NewWattTime("CAISO_NORTH", "", tok); return err }},
		{"uk bad zone", func() error { _, err := NewUKGrid("London"); return err }},
		{"uk zero region", func() error { _, err := NewUKGrid("0"); return err }},
		{"uk empty zone", func() error { _, err := NewUKGrid(" "); return err }},
		{"uk signed region", func() error { _, err := NewUKGrid("+13"); return err }},
		{"em http to a remote host", func() error {
			_, err := NewElectricityMaps("DE", tok, WithBaseURL("http://api.example.com/v3"))
			return err
		}},
		{"wt http to a remote host", func() error {
			_, err := NewWattTime("CAISO_NORTH", "u", tok, WithBaseURL("http://10.0.0.1"))
			return err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.err(); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestProviderRefused: a provider that is not listening is ErrUnavailable.
func TestProviderRefused(t *testing.T) {
	f := newFake(t, ukHandler, 100)
	base := f.URL
	f.Close() // the port is now closed
	p, err := NewUKGrid("GB", WithBaseURL(base))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Intensity(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("err = %v, want ErrUnavailable", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"99999999", maxRetryAfter},
		{"4294967296", maxRetryAfter},              // beyond 32 bits: capped, not ignored
		{"99999999999999999999999", maxRetryAfter}, // beyond 64 bits
		{"21600", maxRetryAfter},
		{"21599", maxRetryAfter - time.Second},
		{"+7", 0},
		{"0x10", 0},
	} {
		if got := parseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestProviderBaseURLRedacted: a base URL refused is named without the
// password it may carry.
func TestProviderBaseURLRedacted(t *testing.T) {
	tok := testSecret(t, testToken)
	for _, base := range []string{"ftp://user:" + testPassword + "@host/x", "http://user:" + testPassword + "@api.example.com"} {
		_, err := NewElectricityMaps("DE", tok, WithBaseURL(base))
		if !errors.Is(err, ErrInvalidConfig) || strings.Contains(err.Error(), testPassword) {
			t.Errorf("base %s: err = %v, want ErrInvalidConfig without the password", base, err)
		}
	}
	// Loopback over plain http is allowed: a test server, a local proxy.
	for _, base := range []string{"http://127.0.0.1:1", "http://[::1]:1", "http://localhost:1"} {
		if _, err := NewElectricityMaps("DE", tok, WithBaseURL(base)); err != nil {
			t.Errorf("base %s: %v", base, err)
		}
	}
}

// TestProviderRedirectKeepsSecret: a provider whose API redirects to
// another server does not send its secret there; the redirect is an
// ErrUnavailable. Both servers are on 127.0.0.1, so Go would forward even
// an Authorization header (same host name).
func TestProviderRedirectKeepsSecret(t *testing.T) {
	var leaked atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("auth-token") != "" || r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
		writeJSON(w, map[string]any{"token": "x", "carbonIntensity": 1, "data": []any{}})
	}))
	defer other.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusFound)
	}))
	defer redirect.Close()

	em, err := NewElectricityMaps("DE", testSecret(t, testToken), WithBaseURL(redirect.URL))
	if err != nil {
		t.Fatal(err)
	}
	wt, err := NewWattTime("CAISO_NORTH", testUser, testSecret(t, testPassword), WithBaseURL(redirect.URL))
	if err != nil {
		t.Fatal(err)
	}
	// A user's client with no redirect policy gets the same protection,
	// and is itself left as it was.
	hc := &http.Client{}
	emUser, err := NewElectricityMaps("DE", testSecret(t, testToken), WithBaseURL(redirect.URL), WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]Provider{"electricitymaps": em, "watttime": wt, "user client": emUser} {
		_, err := p.Intensity(context.Background())
		var se *StatusError
		if !errors.Is(err, ErrUnavailable) || !errors.As(err, &se) || se.Status != http.StatusFound {
			t.Errorf("%s: err = %v, want ErrUnavailable with status 302", name, err)
		}
	}
	if n := leaked.Load(); n != 0 {
		t.Errorf("the secret reached the redirect's target %d times", n)
	}
	if hc.CheckRedirect != nil {
		t.Error("WithHTTPClient modified the caller's client")
	}
}

// TestProviderMalformedFigures: a figure that is negative or beyond
// 10 kg/kWh is not a figure.
func TestProviderMalformedFigures(t *testing.T) {
	for _, pc := range providerCases() {
		for _, v := range []float64{-5, -0.0001, 2e7, 1e300} {
			f := newFake(t, pc.handler, v)
			_, err := pc.build(t, f.URL, pc.zone).Intensity(context.Background())
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s, figure %v: err = %v, want ErrMalformed", pc.name, v, err)
			}
		}
	}
}

// TestWattTimeUnits: the forecast's figure is read in the units its meta
// names; an unknown unit is refused rather than guessed.
func TestWattTimeUnits(t *testing.T) {
	f := newFake(t, wtHandler, 300)
	p, err := NewWattTime("CAISO_NORTH", testUser, testSecret(t, testPassword), WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	f.units.Store("g_co2_per_kwh")
	if it, err := p.Intensity(context.Background()); err != nil || it.MgPerKWh != 300_000 {
		t.Errorf("g_co2_per_kwh: %+v, %v; want 300000 mg/kWh", it, err)
	}
	for _, u := range []string{"kg_co2_per_mwh", "percent", "LBS_CO2_PER_MWH"} {
		f.units.Store(u)
		if _, err := p.Intensity(context.Background()); !errors.Is(err, ErrMalformed) {
			t.Errorf("units %q: err = %v, want ErrMalformed", u, err)
		}
	}
}

// TestWattTimeLoginFaults: a failed login is classified like a data
// request (a /login that is not found is a refusal, not a zone), keeps
// no token, and the next fetch logs in again.
func TestWattTimeLoginFaults(t *testing.T) {
	f := newFake(t, wtHandler, 850.5)
	p, err := NewWattTime("CAISO_NORTH", testUser, testSecret(t, testPassword), WithBaseURL(f.URL))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		fault fault
		want  error
	}{
		{faultServer, ErrServer},
		{faultRateLimited, ErrRateLimited},
		{faultUnavailable, ErrServer},
		{faultMalformed, ErrMalformed},
		{faultWrongShape, ErrUnauthorized},
		{faultSlow, ErrTimeout},
	} {
		f.loginFault.Store(int32(tt.fault))
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := p.Intensity(ctx)
		cancel()
		if !errors.Is(err, tt.want) {
			t.Errorf("login fault %d: err = %v, want %v", tt.fault, err, tt.want)
		}
	}
	if f.hits.Load() != 0 {
		t.Errorf("the forecast was asked %d times with no token", f.hits.Load())
	}
	f.loginFault.Store(int32(faultNone))
	if it, err := p.Intensity(context.Background()); err != nil || it.MgPerKWh != 385_780 {
		t.Errorf("after the faults: %+v, %v", it, err)
	}

	nowhere, err := NewWattTime("CAISO_NORTH", testUser, testSecret(t, testPassword), WithBaseURL(f.URL+"/nowhere"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nowhere.Intensity(context.Background()); !errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrUnknownZone) {
		t.Errorf("/login not found: err = %v, want ErrUnauthorized", err)
	}
}

// TestElectricityMapsAt: a location is asked as lat and lon, and the
// figure's zone is the one the provider answers; a location in no zone
// is ErrUnknownZone, and one off the globe is refused at construction.
func TestElectricityMapsAt(t *testing.T) {
	f := newFake(t, emHandler, 302)
	tok := testSecret(t, testToken)
	p, err := NewElectricityMapsAt(52.52, 13.405, tok, WithBaseURL(f.URL)) // Berlin
	if err != nil {
		t.Fatal(err)
	}
	it, err := p.Intensity(context.Background())
	if err != nil || it.MgPerKWh != 302_000 || it.Zone != "DE" || it.Kind != Average || it.Source != SourceElectricityMaps {
		t.Errorf("Berlin: %+v, %v; want DE at 302 g/kWh", it, err)
	}
	sea, err := NewElectricityMapsAt(0, -30, tok, WithBaseURL(f.URL)) // the Atlantic
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sea.Intensity(context.Background()); !errors.Is(err, ErrUnknownZone) {
		t.Errorf("the Atlantic: err = %v, want ErrUnknownZone", err)
	}
	for _, ll := range [][2]float64{{91, 0}, {-90.5, 0}, {0, 181}, {0, -180.1}, {math.NaN(), 0}, {0, math.Inf(1)}} {
		if _, err := NewElectricityMapsAt(ll[0], ll[1], tok); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("location %v: err = %v, want ErrInvalidConfig", ll, err)
		}
	}
	if _, err := NewElectricityMapsAt(52.52, 13.405, Secret{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("no token: err = %v, want ErrInvalidConfig", err)
	}
}
