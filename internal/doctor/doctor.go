package doctor

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/otelenergy/otelenergy/internal/otelenv"
)

// Status is a finding's verdict.
type Status int

const (
	// OK is a check that passed, or a fact worth printing.
	OK Status = iota
	// Warn is a finding that degrades the figures without making them
	// wrong, or that may be wrong only under some loads.
	Warn
	// Fail is a finding that makes the figures missing or wrong; it
	// comes with a fix.
	Fail
)

func (s Status) String() string {
	switch s {
	case Warn:
		return "WARN"
	case Fail:
		return "FAIL"
	}
	return "ok"
}

// Finding is one line of the report.
type Finding struct {
	Status Status
	// Check names what was checked: "nvml", "GPU 0 energy counter", ...
	Check string
	// Detail is what was found.
	Detail string
	// Fix is one line saying what to do; set on every Fail.
	Fix string
}

// Report is every finding, in the order they were made.
type Report struct {
	Findings []Finding
}

func (r *Report) ok(check, format string, a ...any) {
	r.Findings = append(r.Findings, Finding{Status: OK, Check: check, Detail: fmt.Sprintf(format, a...)})
}

func (r *Report) warn(check, fix, format string, a ...any) {
	r.Findings = append(r.Findings, Finding{Status: Warn, Check: check, Detail: fmt.Sprintf(format, a...), Fix: fix})
}

func (r *Report) fail(check, fix, format string, a ...any) {
	r.Findings = append(r.Findings, Finding{Status: Fail, Check: check, Detail: fmt.Sprintf(format, a...), Fix: fix})
}

// Failed reports whether any finding is a failure.
func (r Report) Failed() bool {
	for _, f := range r.Findings {
		if f.Status == Fail {
			return true
		}
	}
	return false
}

// Find returns the findings whose Check starts with prefix.
func (r Report) Find(prefix string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if strings.HasPrefix(f.Check, prefix) {
			out = append(out, f)
		}
	}
	return out
}

// WriteTo writes the report: one line per finding, "fix:" under each
// failure and warning that has one, and a last line that counts them. A
// detail or fix with newlines in it (a loader's dlerror text) is joined
// onto its line with "; ", so that each check stays one line.
func (r Report) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	var fails, warns int
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "%-4s  %s: %s\n", f.Status, flatten(f.Check), flatten(f.Detail))
		if f.Fix != "" {
			fmt.Fprintf(&b, "      fix: %s\n", flatten(f.Fix))
		}
		switch f.Status {
		case Fail:
			fails++
		case Warn:
			warns++
		}
	}
	fmt.Fprintf(&b, "%d failed, %d warnings, %d checks\n", fails, warns, len(r.Findings))
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// Config is what [Check] checks and how.
type Config struct {
	// LookupEnv reads the environment: CUDA_VISIBLE_DEVICES,
	// NVIDIA_VISIBLE_DEVICES and the OTEL_* variables. Nil is
	// os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Devices are the -devices ids; empty is the environment's choice.
	Devices []string
	// ProcRoot is where the host's /proc is mounted; "" is /proc.
	ProcRoot string
	// SysRoot is where the host's /sys is mounted, for RAPL and Intel
	// hwmon; "" is /sys.
	SysRoot string
	// Window is how long the counters are watched; zero is 3 s.
	Window time.Duration
	// Poll is the time between two reads of the counters while they are
	// watched; zero is 1 ms, well under the fastest update period (20 ms).
	Poll time.Duration
	// Now and Sleep are the clock; nil are time.Now and time.Sleep.
	Now   func() time.Time
	Sleep func(time.Duration)
	// Timeout bounds each network check; zero is 3 s.
	Timeout time.Duration
	// PIDNamespace returns this process's PID namespace, as the link
	// /proc/self/ns/pid reads; nil reads that link. It is checked only
	// when ProcRoot is /proc: a host /proc mounted elsewhere serves the
	// host's pids whatever namespace this process runs in.
	PIDNamespace func() (string, error)
	// AnyPIDNamespace turns the PID namespace checks into warnings: for
	// the proxy, which finds its own processes among NVML's without
	// reading their /proc. The agent needs the host's namespace.
	AnyPIDNamespace bool
}

// hostPIDNamespace is the initial PID namespace's link, the kernel's
// fixed PROC_PID_INIT_INO.
const hostPIDNamespace = "pid:[4026531836]"

func (c *Config) defaults() {
	if c.LookupEnv == nil {
		c.LookupEnv = os.LookupEnv
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.SysRoot == "" {
		c.SysRoot = "/sys"
	}
	if c.Window <= 0 {
		c.Window = 3 * time.Second
	}
	if c.Poll <= 0 {
		c.Poll = time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = time.Sleep
	}
	if c.Timeout <= 0 {
		c.Timeout = 3 * time.Second
	}
	if c.PIDNamespace == nil {
		c.PIDNamespace = func() (string, error) { return os.Readlink("/proc/self/ns/pid") }
	}
}

// checkPIDNamespace fails when the pids under ProcRoot cannot be the
// host's, which NVML reports, even before any process is listed.
func checkPIDNamespace(cfg Config, r *Report) {
	const check = "PID namespace"
	if filepath.Clean(cfg.ProcRoot) != "/proc" {
		r.ok(check, "pids are looked up in %s, taken to be the host's /proc", cfg.ProcRoot)
		return
	}
	ns, err := cfg.PIDNamespace()
	switch {
	case err != nil:
		r.warn(check, "", "unreadable (%v): whether pids are the host's is told only by the processes listed", err)
	case ns != hostPIDNamespace && cfg.AnyPIDNamespace:
		r.warn(check, "", "%s is not the host's %s: NVML's pids are not this /proc's", ns, hostPIDNamespace)
	case ns != hostPIDNamespace:
		r.fail(check, "run in the host's PID namespace (hostPID: true; docker run --pid=host), or mount the host's /proc and set -proc-root to it",
			"%s is not the host's %s: NVML's pids, which are the host's, are not this /proc's", ns, hostPIDNamespace)
	default:
		r.ok(check, "the host's, %s", ns)
	}
}

// Main runs the checks with the arguments that follow "doctor" and writes
// the report to stdout; it returns the exit status: 0 when nothing failed,
// 1 when something did, 2 for a bad argument. -proc-root, -sys-root and
// -devices default to OTELENERGY_PROC_ROOT, OTELENERGY_SYS_ROOT and
// OTELENERGY_DEVICES, the agent's own
// variables, so that the checks see what the agent would.
//
// A binary calls it in one line:
//
//	if len(os.Args) > 1 && os.Args[1] == "doctor" {
//		os.Exit(doctor.Main(ctx, os.Args[2:], os.Stdout, os.Stderr, os.LookupEnv))
//	}
//
// A binary that does not need the host's PID namespace (the proxy) passes
// "-any-pid-namespace" before the user's arguments.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	cfg := Config{LookupEnv: lookupEnv}
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	procRoot, _ := lookupEnv("OTELENERGY_PROC_ROOT")
	devices, _ := lookupEnv("OTELENERGY_DEVICES")
	sysRoot, _ := lookupEnv("OTELENERGY_SYS_ROOT")
	fs.StringVar(&cfg.SysRoot, "sys-root", cmp.Or(sysRoot, "/sys"), "where the host's /sys is mounted, for RAPL and Intel hwmon (env OTELENERGY_SYS_ROOT)")
	fs.StringVar(&cfg.ProcRoot, "proc-root", cmp.Or(procRoot, "/proc"), "where the host's /proc is mounted (env OTELENERGY_PROC_ROOT)")
	fs.StringVar(&devices, "devices", devices, "GPUs to check: comma-separated NVML indices, GPU- or MIG- UUIDs; empty checks those the environment chooses (env OTELENERGY_DEVICES)")
	fs.DurationVar(&cfg.Window, "window", 3*time.Second, "how long each energy counter is watched to measure its update period")
	fs.BoolVar(&cfg.AnyPIDNamespace, "any-pid-namespace", false, "warn instead of failing when this is not the host's PID namespace (the proxy's case; the agent needs the host's)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: doctor [flags]\n\nChecks NVML, each GPU's energy counter, process listing, the other energy\nsources (AMD SMI, Intel hwmon, RAPL), the PID namespace and the metrics\nexporter; exits 1 when a check fails, with a fix for each.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "doctor: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if cfg.Window < 200*time.Millisecond {
		fmt.Fprintf(stderr, "doctor: invalid value %v for -window: at least 200ms, to see several counter steps\n", cfg.Window)
		return 2
	}
	for _, d := range strings.Split(devices, ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.Devices = append(cfg.Devices, d)
		}
	}
	r := Check(ctx, cfg)
	r.WriteTo(stdout)
	if r.Failed() {
		return 1
	}
	return 0
}

// Exporter is the metrics exporter the OTEL_* variables configure, as
// contrib's autoexport reads them: package otelenv's.
type Exporter = otelenv.Exporter

// MetricsExporter returns the metrics exporter the environment configures,
// with autoexport's defaults: otlp over http/protobuf to
// https://localhost:4318/v1/metrics, grpc to localhost:4317, prometheus on
// localhost:9464.
func MetricsExporter(lookupEnv func(string) (string, bool)) Exporter {
	return otelenv.MetricsExporter(lookupEnv)
}

// checkExporter checks that the configured exporter can deliver: the OTLP
// endpoint answers, or the Prometheus endpoint listens beyond loopback.
func checkExporter(ctx context.Context, cfg Config, r *Report) {
	ex := MetricsExporter(cfg.LookupEnv)
	const check = "metrics exporter"
	switch ex.Kind {
	case "none", "console":
		r.warn(check, "set OTEL_METRICS_EXPORTER=otlp and OTEL_EXPORTER_OTLP_ENDPOINT, or prometheus", "OTEL_METRICS_EXPORTER=%s: nothing leaves this host", ex.Kind)
	case "prometheus":
		host, _, _ := net.SplitHostPort(ex.Endpoint)
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			r.fail(check, "set OTEL_EXPORTER_PROMETHEUS_HOST=0.0.0.0 so that Prometheus can scrape it from another host",
				"prometheus on %s answers only on this host", ex.Endpoint)
			return
		}
		r.ok(check, "prometheus on %s", ex.Endpoint)
	case "otlp":
		if ex.Protocol == "grpc" {
			d := net.Dialer{Timeout: cfg.Timeout}
			c, err := d.DialContext(ctx, "tcp", ex.Endpoint)
			if err != nil {
				r.fail(check, exportFix(ex, err), "otlp grpc %s%s: %s", ex.Endpoint, defaultNote(ex), oneLine(err))
				return
			}
			c.Close()
			r.ok(check, "otlp grpc %s accepts connections", ex.Endpoint)
			return
		}
		checkOTLPHTTP(ctx, cfg, ex, r)
	default:
		r.fail(check, "set OTEL_METRICS_EXPORTER to otlp, prometheus, console or none", "OTEL_METRICS_EXPORTER=%q is not an exporter autoexport knows", ex.Kind)
	}
}

// checkOTLPHTTP posts an empty export request, which an OTLP/HTTP receiver
// accepts with 200 and which exports nothing.
func checkOTLPHTTP(ctx context.Context, cfg Config, ex Exporter, r *Report) {
	const check = "metrics exporter"
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ex.Endpoint, http.NoBody)
	if err != nil {
		r.fail(check, "set OTEL_EXPORTER_OTLP_ENDPOINT to a URL such as http://collector:4318", "otlp %s: %s", ex.Endpoint, oneLine(err))
		return
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	c := &http.Client{Timeout: cfg.Timeout}
	resp, err := c.Do(req)
	if err != nil {
		r.fail(check, exportFix(ex, err), "otlp http/protobuf %s%s does not answer: %s", ex.Endpoint, defaultNote(ex), oneLine(err))
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusBadRequest && strings.Contains(string(body), "HTTPS server"):
		r.fail(check, fmt.Sprintf("%s serves TLS: set OTEL_EXPORTER_OTLP_ENDPOINT=https://%s", ex.Endpoint, req.URL.Host),
			"%s answers 400: it expects TLS, and the exporter speaks plain HTTP", ex.Endpoint)
	case resp.StatusCode/100 == 2:
		r.ok(check, "otlp http/protobuf %s accepts an export (%d)", ex.Endpoint, resp.StatusCode)
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		r.fail(check, "point OTEL_EXPORTER_OTLP_ENDPOINT at the receiver's base URL (the exporter adds /v1/metrics)",
			"%s answers %d: no OTLP receiver at that path", ex.Endpoint, resp.StatusCode)
	default:
		r.warn(check, "", "otlp http/protobuf %s answers %d to an empty export", ex.Endpoint, resp.StatusCode)
	}
}

// defaultNote says that ex is autoexport's default, which no variable
// chose.
func defaultNote(ex Exporter) string {
	if ex.Default {
		return " (autoexport's default: no OTEL_EXPORTER_OTLP_ENDPOINT is set)"
	}
	return ""
}

// exportFix is the fix for an OTLP endpoint that did not answer, by the
// cause err shows: a name that does not resolve, plain HTTP reached over
// TLS (or the reverse), an untrusted certificate, nothing listening, no
// answer in time. Each names what it saw, so that a setting that is
// already right is not offered as the fix.
func exportFix(ex Exporter, err error) string {
	host := ex.Endpoint
	if u, perr := url.Parse(ex.Endpoint); perr == nil && u.Host != "" {
		host = u.Host
	}
	name, _, _ := net.SplitHostPort(host)
	var dns *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	msg := err.Error()
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return fmt.Sprintf("the name %q does not resolve on this node (no such host): set OTEL_EXPORTER_OTLP_ENDPOINT to the Collector's address as this node resolves it (a Service's full DNS name, such as http://otel-collector.observability.svc.cluster.local:4318, or an IP)", dns.Name)
	case errors.As(err, &dns):
		return fmt.Sprintf("the name %q could not be looked up (%s): check this node's DNS (/etc/resolv.conf), or set OTEL_EXPORTER_OTLP_ENDPOINT with an IP", dns.Name, dns.Err)
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return fmt.Sprintf("%s speaks plain HTTP, and the exporter uses TLS (https): set OTEL_EXPORTER_OTLP_ENDPOINT=http://%s", host, host)
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr):
		return fmt.Sprintf("%s's certificate is not trusted here: give its CA with OTEL_EXPORTER_OTLP_CERTIFICATE=<ca.pem>, or use an http:// endpoint", host)
	case strings.Contains(msg, "tls: "):
		return fmt.Sprintf("the TLS handshake with %s failed: use an http:// endpoint for a plain-HTTP receiver, or give the receiver's CA with OTEL_EXPORTER_OTLP_CERTIFICATE", host)
	case errors.Is(err, syscall.ECONNREFUSED):
		if ex.Default {
			return fmt.Sprintf("nothing listens on %s, autoexport's default: set OTEL_EXPORTER_OTLP_ENDPOINT to your Collector (http://collector:4318), or OTEL_METRICS_EXPORTER=prometheus to be scraped", host)
		}
		return fmt.Sprintf("nothing listens on %s (connection refused): start the Collector there, or point OTEL_EXPORTER_OTLP_ENDPOINT at where it runs", host)
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return fmt.Sprintf("%s did not answer in time: a firewall or NetworkPolicy drops the traffic, or %q is not the Collector's address", host, name)
	}
	return fmt.Sprintf("check that a Collector's OTLP receiver listens at %s (%s), or set OTEL_EXPORTER_OTLP_ENDPOINT to where it does", ex.Endpoint, ex.Protocol)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// oneLine is err's message on one line: some libraries' messages (dlerror's,
// a server's) carry newlines, and the report keeps one line per check.
func oneLine(err error) string { return flatten(err.Error()) }

// flatten joins s's lines with "; ".
func flatten(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	var parts []string
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// checkPids reports the listed pids of a board that -proc-root does not
// show: NVML reports host pids, which only the host's PID namespace (or
// its /proc mounted at ProcRoot) shows.
func checkPids(cfg Config, board string, pids []uint32, r *Report) {
	check := board + " processes in " + cfg.ProcRoot
	if len(pids) == 0 {
		r.ok(check, "no process listed, nothing to look up")
		return
	}
	var missing []string
	for _, p := range pids {
		if _, err := os.Stat(filepath.Join(cfg.ProcRoot, strconv.FormatUint(uint64(p), 10))); err != nil {
			missing = append(missing, strconv.FormatUint(uint64(p), 10))
		}
	}
	if len(missing) > 0 && cfg.AnyPIDNamespace {
		r.warn(check, "", "%d of %d listed pids are not there (%s): not the host's PID namespace", len(missing), len(pids), strings.Join(missing, ", "))
		return
	}
	if len(missing) > 0 {
		r.fail(check, "run in the host's PID namespace (hostPID: true; docker run --pid=host), or mount the host's /proc and set -proc-root to it",
			"%d of %d listed pids are not there (%s): this PID namespace is not the host's", len(missing), len(pids), strings.Join(missing, ", "))
		return
	}
	r.ok(check, "all %d listed pids visible", len(pids))
}
