// Package otelenv reads the standard OpenTelemetry environment the way
// contrib's autoexport does: whether it asks for an exporter, so that the
// examples and the binaries run quietly with no collector, and which
// exporter it configures and where that exporter sends, so that a message
// about a failed export can name both. It uses only the standard library,
// so the library's go.mod gains nothing from it.
package otelenv

import (
	"cmp"
	"net"
	"net/url"
	"os"
	"strings"
)

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

// Exporter is the exporter of one signal that the OTEL_* variables
// configure, as contrib's autoexport reads them.
type Exporter struct {
	// Kind is OTEL_<signal>_EXPORTER's first entry: otlp (the default),
	// prometheus (metrics only), console or none.
	Kind string
	// Protocol is the OTLP protocol, http/protobuf (the default) or grpc;
	// "" for other kinds.
	Protocol string
	// Endpoint is where the OTLP exporter sends (a URL for
	// http/protobuf, host:port for grpc), or where the Prometheus exporter
	// listens (host:port); "" for console and none.
	Endpoint string
	// Default reports an OTLP exporter that no endpoint variable points
	// anywhere: it sends to autoexport's default on localhost, where a
	// node rarely runs a Collector.
	Default bool
}

// String names the exporter and where it sends, for a log line or an
// error: "otlp http/protobuf to https://localhost:4318/v1/metrics",
// "prometheus on localhost:9464", "console".
func (e Exporter) String() string {
	switch {
	case e.Kind == "otlp":
		return "otlp " + e.Protocol + " to " + e.Endpoint
	case e.Endpoint != "":
		return e.Kind + " on " + e.Endpoint
	}
	return e.Kind
}

// MetricsExporter returns the metrics exporter the environment configures,
// with autoexport's defaults: otlp over http/protobuf to
// https://localhost:4318/v1/metrics, grpc to localhost:4317, prometheus on
// localhost:9464.
func MetricsExporter(lookupEnv func(string) (string, bool)) Exporter {
	return exporterIn(lookupEnv, "METRICS", "/v1/metrics")
}

// TracesExporter returns the trace exporter the environment configures,
// as [MetricsExporter] does for metrics (the path is /v1/traces).
func TracesExporter(lookupEnv func(string) (string, bool)) Exporter {
	return exporterIn(lookupEnv, "TRACES", "/v1/traces")
}

func exporterIn(lookupEnv func(string) (string, bool), signal, path string) Exporter {
	get := func(keys ...string) string {
		for _, k := range keys {
			if v, ok := lookupEnv(k); ok && strings.TrimSpace(v) != "" {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	kind, _, _ := strings.Cut(cmp.Or(get("OTEL_"+signal+"_EXPORTER"), "otlp"), ",")
	ex := Exporter{Kind: strings.TrimSpace(kind)}
	switch ex.Kind {
	case "prometheus":
		ex.Endpoint = net.JoinHostPort(cmp.Or(get("OTEL_EXPORTER_PROMETHEUS_HOST"), "localhost"), cmp.Or(get("OTEL_EXPORTER_PROMETHEUS_PORT"), "9464"))
	case "otlp":
		ex.Protocol = cmp.Or(get("OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
		insecure := strings.EqualFold(get("OTEL_EXPORTER_OTLP_"+signal+"_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"), "true")
		bySignal := get("OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT")
		base := get("OTEL_EXPORTER_OTLP_ENDPOINT")
		ex.Default = bySignal == "" && base == ""
		if ex.Protocol == "grpc" {
			ep := cmp.Or(bySignal, base, "localhost:4317")
			if u, err := url.Parse(ep); err == nil && u.Host != "" {
				ep = u.Host
			}
			ex.Endpoint = ep
			break
		}
		scheme := "https://"
		if insecure {
			scheme = "http://"
		}
		switch {
		case bySignal != "":
			ex.Endpoint = bySignal // used as is, path included
		case base != "":
			ex.Endpoint = strings.TrimSuffix(base, "/") + path
		default:
			ex.Endpoint = "localhost:4318" + path
		}
		if !strings.Contains(ex.Endpoint, "://") {
			ex.Endpoint = scheme + ex.Endpoint
		}
	}
	return ex
}
