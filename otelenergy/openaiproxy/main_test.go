package openaiproxy_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: a request the
// proxy serves, a rebuilt stream and the accuracy scenario's clients all
// end with their tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
