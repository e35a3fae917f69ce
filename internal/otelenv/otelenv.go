// Package otelenv says whether the standard OpenTelemetry environment asks
// for an exporter, so that the examples and the binaries run quietly with
// no collector. It uses only the standard library, so the library's
// go.mod gains nothing from it.
package otelenv

import "os"

// Wanted reports whether the environment asks for an exporter of kind
// (TRACES or METRICS): by naming one other than none in OTEL_<kind>_EXPORTER,
// or by setting an OTLP endpoint, in which case autoexport's default (otlp)
// applies.
func Wanted(kind string) bool { return WantedIn(os.LookupEnv, kind) }

// WantedIn is [Wanted] over the environment that lookupEnv reads.
func WantedIn(lookupEnv func(string) (string, bool), kind string) bool {
	if v, _ := lookupEnv("OTEL_" + kind + "_EXPORTER"); v != "" {
		return v != "none"
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_" + kind + "_ENDPOINT"} {
		if v, _ := lookupEnv(k); v != "" {
			return true
		}
	}
	return false
}
