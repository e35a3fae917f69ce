package proxy

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otelenergy/otelenergy/carbon"
)

// TestTokenNotInBackendEnv: the provider's secret is read from
// OTELENERGY_CARBON_TOKEN, and in wrapper mode the backend is started
// with the proxy's whole environment (exec.Cmd.Env nil), so the
// Electricity Maps token (or WattTime password) lands in the backend's
// environment (/proc/<pid>/environ, its crash dumps and env logging).
// TestTokenNotInBackendEnv: in wrapper mode the backend does not inherit
// the carbon provider's secret, and the proxy does not log it.
func TestTokenNotInBackendEnv(t *testing.T) {
	const secret = "review-s3cr3t-token"
	t.Setenv("OTELENERGY_CARBON_TOKEN", secret)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	t.Cleanup(fake.Close)
	carbonClient = []carbon.ClientOption{carbon.WithBaseURL(fake.URL)}
	t.Cleanup(func() { carbonClient = nil })
	out := filepath.Join(t.TempDir(), "env")
	var logs syncBuffer
	Main([]string{"-simulate", "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0",
		"-carbon-provider", "electricitymaps", "-carbon-zone", "DE",
		"--", "sh", "-c", "env > " + out},
		Env{Stdout: &logs, Stderr: &logs, Signals: make(chan os.Signal, 1), LookupEnv: os.LookupEnv})
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the backend did not run: %v\n%s", err, logs.String())
	}
	if strings.Contains(string(b), secret) {
		t.Errorf("the backend's environment holds the carbon provider's secret (OTELENERGY_CARBON_TOKEN)")
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the secret is in the proxy's log")
	}
}
