package carbon

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fault is what a fake provider server does with the next requests.
type fault int32

const (
	faultNone        fault = iota // the documented answer
	faultRateLimited              // 429 with Retry-After: 7
	faultServer                   // 500
	faultSlow                     // no answer until the client gives up
	faultMalformed                // 200 with a body that is not JSON
	faultWrongShape               // 200 with JSON that lacks the figure
	faultUnavailable              // 503 with Retry-After: 11
	faultOversized                // the documented answer, then padding past maxBody and garbage
)

// Test credentials. The token is long and distinctive so that a search
// for it in every error and print is meaningful.
const (
	testToken    = "tok-9f8e7d6c5b4a-SECRET"
	testUser     = "alice"
	testPassword = "pw-1a2b3c4d-SECRET"
	wtToken      = "jwt-eyJhbGciOi-SECRET"
)

// fakeServer is an httptest server on 127.0.0.1 that answers in one
// provider's documented shape, with a fault that tests switch.
type fakeServer struct {
	*httptest.Server
	fault  atomic.Int32
	grams  atomic.Uint64 // math.Float64bits of the figure, in the provider's unit
	hits   atomic.Int64  // data requests
	logins atomic.Int64
	// expireNext makes the next data request answer 401, as an expired
	// WattTime token does.
	expireNext atomic.Bool
	// loginFault is the fault of WattTime's /login, apart from fault,
	// which is the data requests'.
	loginFault atomic.Int32
	// units is WattTime's meta.units; "" is lbs_co2_per_mwh.
	units atomic.Value
	// shift moves every instant the fake answers (its figures are for
	// 2026-12-01 11:00 UTC) by this many ns.
	shift atomic.Int64
}

// at formats the instant hh:mm on 2026-12-01 UTC, moved by f.shift, in
// layout.
func (f *fakeServer) at(hh, mm int, layout string) string {
	t := time.Date(2026, 12, 1, hh, mm, 0, 0, time.UTC).Add(time.Duration(f.shift.Load()))
	return t.Format(layout)
}

func (f *fakeServer) setFigure(v float64) { f.grams.Store(math.Float64bits(v)) }
func (f *fakeServer) figure() float64     { return math.Float64frombits(f.grams.Load()) }

// faulted answers the data request fault modes common to every
// provider; it reports whether it answered.
func (f *fakeServer) faulted(w http.ResponseWriter, r *http.Request) bool {
	return answerFault(w, r, fault(f.fault.Load()))
}

// answerFault answers with fault ft; it reports whether it answered.
func answerFault(w http.ResponseWriter, r *http.Request, ft fault) bool {
	switch ft {
	case faultRateLimited:
		w.Header().Set("Retry-After", "7")
		http.Error(w, `{"error":"rate limited"}`, http.StatusTooManyRequests)
	case faultServer:
		http.Error(w, `{"error":"internal"}`, http.StatusInternalServerError)
	case faultUnavailable:
		w.Header().Set("Retry-After", "11")
		http.Error(w, `{"error":"maintenance"}`, http.StatusServiceUnavailable)
	case faultSlow:
		// Wait for the client to give up; bounded so that no handler
		// outlives a test by much.
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	case faultMalformed:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"zone": "DE", "carbonIntensity": 30`)
	case faultWrongShape:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"data": [], "something": "else"}`)
	default:
		return false
	}
	return true
}

func (f *fakeServer) wtUnits() string {
	if u, _ := f.units.Load().(string); u != "" {
		return u
	}
	return "lbs_co2_per_mwh"
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func newFake(t testing.TB, h func(f *fakeServer) http.Handler, figure float64) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	f.setFigure(figure)
	inner := h(f)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r)
		if fault(f.fault.Load()) == faultOversized && r.URL.Path != "/login" {
			// Valid JSON, then whitespace up to past the client's limit,
			// then what no JSON decoder accepts: cut at the limit, the
			// body would parse.
			fmt.Fprint(w, strings.Repeat(" ", maxBody), "garbage")
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// emHandler answers GET /carbon-intensity/latest?zone=Z as Electricity
// Maps v3 documents it; zones other than DE and FR are unknown (404).
func emHandler(f *fakeServer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /carbon-intensity/latest", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("auth-token") != testToken {
			http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		f.hits.Add(1)
		if f.faulted(w, r) {
			return
		}
		zone := r.URL.Query().Get("zone")
		if q := r.URL.Query(); q.Has("lat") || q.Has("lon") {
			// By location: a box around Germany is DE, the rest no zone.
			var lat, lon float64
			_, err1 := fmt.Sscan(q.Get("lat"), &lat)
			_, err2 := fmt.Sscan(q.Get("lon"), &lon)
			if zone != "" || err1 != nil || err2 != nil {
				http.Error(w, `{"message":"bad query"}`, http.StatusBadRequest)
				return
			}
			if lat >= 47 && lat <= 55 && lon >= 6 && lon <= 15 {
				zone = "DE"
			}
		}
		if zone != "DE" && zone != "FR" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"status":"error","message":"Zone '%s' does not exist."}`, zone)
			return
		}
		writeJSON(w, map[string]any{
			"zone":               zone,
			"carbonIntensity":    f.figure(),
			"datetime":           f.at(11, 0, "2006-01-02T15:04:05.000Z"),
			"updatedAt":          "2026-12-01T11:04:21.002Z",
			"createdAt":          "2026-11-28T11:52:37.667Z",
			"emissionFactorType": "lifecycle",
			"isEstimated":        false,
			"estimationMethod":   nil,
		})
	})
	return mux
}

// wtHandler answers GET /login (basic auth) and GET /v3/forecast (bearer)
// as WattTime v3 documents them; regions other than CAISO_NORTH are
// unknown (400).
func wtHandler(f *fakeServer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != testUser || p != testPassword {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		f.logins.Add(1)
		switch fault(f.loginFault.Load()) {
		case faultNone:
		case faultWrongShape:
			writeJSON(w, map[string]string{"error": "no token today"})
			return
		default:
			answerFault(w, r, fault(f.loginFault.Load()))
			return
		}
		writeJSON(w, map[string]string{"token": wtToken})
	})
	mux.HandleFunc("GET /v3/forecast", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+wtToken || f.expireNext.CompareAndSwap(true, false) {
			http.Error(w, `{"error":"token expired"}`, http.StatusUnauthorized)
			return
		}
		f.hits.Add(1)
		if f.faulted(w, r) {
			return
		}
		q := r.URL.Query()
		if q.Get("signal_type") != "co2_moer" {
			http.Error(w, `{"error":"bad query"}`, http.StatusUnprocessableEntity)
			return
		}
		if q.Get("region") != "CAISO_NORTH" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":"Invalid region %s"}`, q.Get("region"))
			return
		}
		writeJSON(w, map[string]any{
			"data": []map[string]any{
				{"point_time": f.at(11, 5, time.RFC3339), "value": f.figure()},
				{"point_time": f.at(11, 10, time.RFC3339), "value": f.figure() + 40},
				{"point_time": f.at(11, 15, time.RFC3339), "value": f.figure() + 80},
			},
			"meta": map[string]any{
				"data_point_period_seconds":   300,
				"region":                      "CAISO_NORTH",
				"signal_type":                 "co2_moer",
				"units":                       f.wtUnits(),
				"generated_at_period_seconds": 300,
				"generated_at":                "2026-12-01T11:05:00+00:00",
				"model":                       map[string]string{"date": "2026-03-01"},
			},
		})
	})
	return mux
}

// ukHandler answers GET /intensity and GET /regional/regionid/N as the
// Carbon Intensity API documents them; region ids above 17 are unknown
// (400). The national figure has an actual; the regional ones do not.
func ukHandler(f *fakeServer) http.Handler {
	mux := http.NewServeMux()
	period := func(actual bool) map[string]any {
		in := map[string]any{"forecast": f.figure() + 5, "index": "moderate"}
		if actual {
			in["actual"] = f.figure()
		}
		return map[string]any{"from": f.at(11, 0, "2006-01-02T15:04Z"), "to": f.at(11, 30, "2006-01-02T15:04Z"), "intensity": in}
	}
	mux.HandleFunc("GET /intensity", func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		if f.faulted(w, r) {
			return
		}
		writeJSON(w, map[string]any{"data": []any{period(true)}})
	})
	mux.HandleFunc("GET /regional/regionid/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		if f.faulted(w, r) {
			return
		}
		var id int
		if _, err := fmt.Sscan(r.PathValue("id"), &id); err != nil || id < 1 || id > 17 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"code":"400 Bad Request","message":"Please enter a valid region id, 1-17."}}`)
			return
		}
		p := period(false)
		p["generationmix"] = []map[string]any{{"fuel": "wind", "perc": 41.2}}
		writeJSON(w, map[string]any{"data": []any{map[string]any{
			"regionid": id, "dnoregion": "UKPN London", "shortname": "London", "data": []any{p},
		}}})
	})
	return mux
}

func testSecret(t testing.TB, v string) Secret {
	t.Helper()
	name := "OTELENERGY_TEST_SECRET_" + strings.ToUpper(strings.ReplaceAll(t.Name(), "/", "_"))
	t.Setenv(name, v)
	s, err := SecretFromEnv(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
