package doctor_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/doctor"
)

// TestExporterFixNamesCause fails the exporter check against real
// endpoints on 127.0.0.1 that are wrong in different ways, and checks
// that each fix names the cause seen, not a setting that may already be
// the one in use.
func TestExporterFixNamesCause(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer tlsSrv.Close()
	plainHost := strings.TrimPrefix(plain.URL, "http://")
	tlsHost := strings.TrimPrefix(tlsSrv.URL, "https://")
	tests := []struct {
		name   string
		env    map[string]string
		detail string
		fix    []string // each must be in the fix
	}{
		{name: "connection refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + closedAddr(t)},
			detail: "connection refused", fix: []string{"nothing listens on 127.0.0.1:", "connection refused"}},
		{name: "plain HTTP reached over TLS", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://" + plainHost},
			detail: "server gave HTTP response to HTTPS client", fix: []string{"speaks plain HTTP", "OTEL_EXPORTER_OTLP_ENDPOINT=http://" + plainHost}},
		{name: "TLS reached over plain HTTP", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + tlsHost},
			detail: "expects TLS", fix: []string{"serves TLS", "https://" + tlsHost}},
		{name: "untrusted certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://" + tlsHost},
			detail: "certificate", fix: []string{"certificate is not trusted", "OTEL_EXPORTER_OTLP_CERTIFICATE"}},
		{name: "grpc refused", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + closedAddr(t)},
			detail: "connection refused", fix: []string{"nothing listens on 127.0.0.1:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r doctor.Report
			doctor.CheckExporter(context.Background(), doctor.Config{LookupEnv: envOf(tt.env), Timeout: 10 * time.Second}, &r)
			f := r.Find("metrics exporter")
			if len(f) != 1 || f[0].Status != doctor.Fail {
				t.Fatalf("findings %+v, want one failure", f)
			}
			if !strings.Contains(f[0].Detail, tt.detail) {
				t.Errorf("detail %q does not say %q", f[0].Detail, tt.detail)
			}
			for _, w := range tt.fix {
				if !strings.Contains(f[0].Fix, w) {
					t.Errorf("fix %q does not say %q", f[0].Fix, w)
				}
			}
		})
	}
}

// TestExportFixCauses checks the fixes for causes a test on loopback
// cannot stage: a name that does not resolve, a lookup that fails, no
// answer in time, and nothing listening on autoexport's default.
func TestExportFixCauses(t *testing.T) {
	dial := func(err error) error {
		return &url.Error{Op: "Post", URL: "http://collector:4318/v1/metrics", Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}}
	}
	set := doctor.Exporter{Kind: "otlp", Protocol: "http/protobuf", Endpoint: "http://collector:4318/v1/metrics"}
	def := doctor.Exporter{Kind: "otlp", Protocol: "http/protobuf", Endpoint: "https://localhost:4318/v1/metrics", Default: true}
	tests := []struct {
		name     string
		ex       doctor.Exporter
		err      error
		fix      []string
		notInFix string
	}{
		{"no such host", set, dial(&net.DNSError{Err: "no such host", Name: "collector", IsNotFound: true}),
			[]string{`"collector" does not resolve`, "no such host"}, "OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318"},
		{"lookup failed", set, dial(&net.DNSError{Err: "server misbehaving", Name: "collector", Server: "10.0.0.10:53"}),
			[]string{`"collector" could not be looked up`, "server misbehaving", "/etc/resolv.conf"}, ""},
		{"timeout", set, fmt.Errorf("post: %w", context.DeadlineExceeded),
			[]string{"collector:4318 did not answer in time", "NetworkPolicy"}, ""},
		{"nothing on the default", def, dial(fmt.Errorf("connect: %w", errRefused())),
			[]string{"autoexport's default", "localhost:4318", "OTEL_EXPORTER_OTLP_ENDPOINT"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fix := doctor.ExportFix(tt.ex, tt.err)
			for _, w := range tt.fix {
				if !strings.Contains(fix, w) {
					t.Errorf("fix %q does not say %q", fix, w)
				}
			}
			if tt.notInFix != "" && strings.Contains(fix, tt.notInFix) {
				t.Errorf("fix %q offers %q, the setting already in use", fix, tt.notInFix)
			}
		})
	}
}

// TestWriteToOneLinePerCheck: a detail or fix with newlines in it (a
// loader's dlerror text, two paths tried) stays on its check's line.
func TestWriteToOneLinePerCheck(t *testing.T) {
	r := doctor.Report{Findings: []doctor.Finding{
		{Status: doctor.OK, Check: "amdsmi", Detail: "absent: libamd_smi.so: cannot open shared object file\n/opt/rocm/lib/libamd_smi.so: cannot open shared object file\n"},
		{Status: doctor.Fail, Check: "nvml", Detail: "not usable", Fix: "install the driver\r\nthen retry"},
	}}
	var b bytes.Buffer
	r.WriteTo(&b)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	want := []string{
		"ok    amdsmi: absent: libamd_smi.so: cannot open shared object file; /opt/rocm/lib/libamd_smi.so: cannot open shared object file",
		"FAIL  nvml: not usable",
		"      fix: install the driver; then retry",
		"1 failed, 0 warnings, 2 checks",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("report:\n%s\nwant:\n%s", b.String(), strings.Join(want, "\n"))
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// errRefused is ECONNREFUSED as a dial reports it.
func errRefused() error { return syscall.ECONNREFUSED }
