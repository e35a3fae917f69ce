package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/e2e/internal/gguf"
)

// The real engine: Ollama, pinned in ollama.mod, built for the CPU from
// the Go module proxy, serving the tiny random Llama of package gguf.
const (
	ollamaBudget = 30 * time.Minute // capped further by go test -timeout
	ollamaModel  = "tiny"
	// ollamaParallel is OLLAMA_NUM_PARALLEL: the soak's streams are
	// decoded together.
	ollamaParallel = 8
	basicTokens    = 32
	// longTokens is the length of the stream the drain and the client
	// that goes away read: at the 440-560 tokens/s of an idle machine it
	// lasts seconds, so that it is in flight when the test acts on it.
	longTokens   = 3000
	soakStreams  = 8
	soakDuration = 30 * time.Second
	// eventWait bounds the wait for something that takes the proxy one
	// of its 5 s process listings, or Ollama a model load: only a broken
	// run reaches it.
	eventWait = 3 * time.Minute
	// driveWait bounds one run of ollamadrive: a soak of 30 s and
	// completions that take seconds; only a broken run reaches it.
	driveWait = 10 * time.Minute
)

// ollamaModelfile imports the tiny model: one thread keeps it fast on a
// shared machine (the default threads collapse it there), and the
// template passes the messages through.
const ollamaModelfile = `FROM ./tiny.gguf
TEMPLATE """{{- range .Messages }}{{ .Role }}: {{ .Content }}
{{ end }}assistant: """
PARAMETER num_thread 1
PARAMETER num_ctx 4096
`

// proxyConfig is one configuration of the proxy that every Ollama check
// runs under, in front of Ollama and as its wrapper.
type proxyConfig struct {
	name string
	args []string // the proxy's flags beyond those every run has
	// completionsOnly runs only the completions' checks: what the row
	// changes reaches no stream, so the soak, the disconnect and the
	// drain (each of streams) would repeat the other row's.
	completionsOnly bool
}

// proxyConfigs are the configurations the Ollama checks run under: the
// proxy's upstream streaming on (the default: a whole body through the
// proxy is rebuilt from the stream it asked Ollama for) and off (the
// body is Ollama's own, passed through). Under both, each whole body
// must equal Ollama's own for the same request but id and created
// (sameButIDCreated), with its usage and trailers.
var proxyConfigs = []proxyConfig{
	{name: "upstream streaming on", args: []string{"-upstream-stream=true"}},
	{name: "upstream streaming off", args: []string{"-upstream-stream=false"}, completionsOnly: true},
}

// TestOllama runs otelenergy-proxy in front of a real Ollama and as its
// wrapper, under each of proxyConfigs, and checks with the official
// openai-go client (ollamadrive): chat and text completions, whole and
// streamed, run to max_tokens with usage equal to Ollama's own and the
// energy trailers; each whole body equals Ollama's own for the same
// request but id and created, and each stream's text the whole
// response's; the proxy's log counts the tokens Ollama reports; the
// runner Ollama starts at the first request, and again after an unload,
// is attributed from the proxy's first listing after it answered, and
// drops out once it exits; 8 concurrent streams for 30 s end without an
// error; a client that goes away is logged as such and the proxy serves
// on; SIGTERM lets a stream in flight finish and then stops the backend.
func TestOllama(t *testing.T) {
	summarize(t)
	if testing.Short() {
		t.Skip("end-to-end test: builds Ollama and runs it")
	}
	ctx := budgetContext(t, ollamaBudget)
	clk := newPhaseClock(t)
	root, binDir := repoDirs(t)
	e := &engine{
		root:   root,
		ollama: filepath.Join(binDir, "ollama"),
		proxy:  filepath.Join(binDir, "otelenergy-proxy"),
		drive:  filepath.Join(binDir, "ollamadrive"),
		home:   t.TempDir(),
	}
	// Everything the checks start inherits HOME: whatever outlives its
	// own stop (a runner orphaned by a killed server) is killed by pid.
	t.Cleanup(func() { killMarked("HOME=" + e.home) })
	buildAll(ctx, t, []goBuild{
		ollamaBuild(root, e.ollama),
		{"proxy", filepath.Join(root, "cmd", "otelenergy-proxy"), append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work")), []string{"-o", e.proxy, "."}, nil},
		// openai-go lives in a module of its own (see ollamadrive).
		{"ollamadrive", filepath.Join(root, "e2e", "ollamadrive"), append(os.Environ(), "GOWORK=off"), []string{"-o", e.drive, "."}, nil},
	})
	clk.mark("build ollama, the proxy and ollamadrive")
	e.importModel(ctx, t)
	clk.mark("write and import the tiny model")
	for _, mode := range []string{"front", "wrapper"} {
		for _, pc := range proxyConfigs {
			t.Run(mode+"/"+pc.name, func(t *testing.T) { e.check(ctx, t, mode, pc) })
			clk.mark(mode + "/" + pc.name)
		}
	}
}

// engine is what the Ollama checks share: the binaries and Ollama's home,
// which holds the imported model.
type engine struct {
	root, ollama, proxy, drive string
	home                       string
}

// ollamaBuild is the build of Ollama from ollama.mod, for the CPU. Its
// module zip leaves out llama.cpp's vendored headers, which prepare
// provides.
func ollamaBuild(root, bin string) goBuild {
	dir := filepath.Join(root, "e2e")
	return goBuild{"ollama", dir, append(os.Environ(), "GOWORK=off", "CGO_ENABLED=1"),
		[]string{"-modfile=ollama.mod", "-o", bin, "github.com/ollama/ollama"},
		func(ctx context.Context) ([]string, error) {
			inc, err := ollamaHeaders(ctx, dir, filepath.Dir(bin))
			if err != nil {
				return nil, fmt.Errorf("llama.cpp's vendored headers: %w", err)
			}
			return []string{"CPATH=" + inc}, nil
		}}
}

// ollamaHeaders returns a directory holding the three headers of
// llama.cpp's vendor/ that Ollama's module zip leaves out, kept in binDir
// for later runs: nlohmann/json.hpp and stb/stb_image.h from Debian's
// nlohmann-json3-dev and libstb-dev, fetched as Prometheus 2 is (apt-get
// download and dpkg-deb, no root needed), and miniaudio/miniaudio.h from
// the Go module github.com/gen2brain/malgo that ollama.mod pins.
func ollamaHeaders(ctx context.Context, e2eDir, binDir string) (string, error) {
	inc := filepath.Join(binDir, "ollama-include")
	want := []string{"nlohmann/json.hpp", "stb/stb_image.h", "miniaudio/miniaudio.h"}
	have := func(dir string) bool {
		for _, h := range want {
			if _, err := os.Stat(filepath.Join(dir, h)); err != nil {
				return false
			}
		}
		return true
	}
	if have(inc) {
		return inc, nil
	}
	tmp, err := os.MkdirTemp(binDir, "ollama-include-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	debDir := filepath.Join(tmp, "deb")
	if err := os.Mkdir(debDir, 0o755); err != nil {
		return "", err
	}
	pkgs := []string{"nlohmann-json3-dev", "libstb-dev"}
	download := func() error {
		return runCommand(ctx, provisionTimeout, debDir, nil, "apt-get", append([]string{"download"}, pkgs...)...)
	}
	if err := download(); err != nil {
		if uerr := runCommand(ctx, provisionTimeout, debDir, nil, "apt-get", "update"); uerr != nil {
			return "", fmt.Errorf("apt-get download %s: %v; apt-get update: %w", strings.Join(pkgs, " "), err, uerr)
		}
		if err := download(); err != nil {
			return "", err
		}
	}
	debs, _ := filepath.Glob(filepath.Join(debDir, "*.deb"))
	unpacked := filepath.Join(tmp, "root")
	for _, deb := range debs {
		if err := runCommand(ctx, provisionTimeout, tmp, nil, "dpkg-deb", "-x", deb, unpacked); err != nil {
			return "", err
		}
	}
	staged := filepath.Join(unpacked, "usr", "include")
	var mod struct{ Dir string }
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-modfile=ollama.mod", "-json", "github.com/gen2brain/malgo")
	cmd.Dir, cmd.Env = e2eDir, append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	if err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download github.com/gen2brain/malgo: %v %s", err, out)
	}
	audio, err := os.ReadFile(filepath.Join(mod.Dir, "miniaudio.h"))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(staged, "miniaudio"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(staged, "miniaudio", "miniaudio.h"), audio, 0o644); err != nil {
		return "", err
	}
	if !have(staged) {
		return "", fmt.Errorf("%s lacks one of %q after unpacking %q", staged, want, debs)
	}
	// Renamed into place whole, so that an interrupted run is never taken
	// for a finished one.
	if err := os.Rename(staged, inc); err != nil && !have(inc) { // a concurrent run may have won
		return "", err
	}
	return inc, nil
}

// ollamaEnv is the environment Ollama serves in, at addr, from the
// engine's home: one process per test, the models in its home, no cloud
// models, no per-request log lines, and a keep-alive longer than the test
// so that only the test unloads the model.
func (e *engine) ollamaEnv(addr string) []string {
	return append(withoutEnv(os.Environ(), "OLLAMA_", "OTEL_", "HOME="),
		"OLLAMA_HOST="+addr,
		"OLLAMA_MODELS="+filepath.Join(e.home, "models"),
		"HOME="+e.home,
		"OLLAMA_NUM_PARALLEL="+strconv.Itoa(ollamaParallel),
		"OLLAMA_NO_CLOUD=1",
		"OLLAMA_KEEP_ALIVE=1h",
		"GIN_MODE=release",
	)
}

// importModel writes the tiny model and imports it into the engine's
// home with ollama create, which needs a server: one started for it, and
// stopped.
func (e *engine) importModel(ctx context.Context, t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "tiny.gguf"))
	if err != nil {
		fatal(t, err)
	}
	if err := gguf.Write(f, gguf.TinyLlama(1)); err != nil {
		fatal(t, err)
	}
	if err := f.Close(); err != nil {
		fatal(t, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Modelfile"), []byte(ollamaModelfile), 0o644); err != nil {
		fatal(t, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	env := e.ollamaEnv(addr)
	srv := e.startOllama(ctx, t, env, addr)
	if err := runCommand(ctx, startTimeout, dir, env, e.ollama, "create", ollamaModel, "-f", "Modelfile"); err != nil {
		fatalf(t, "ollama create: %v", err)
	}
	srv.stop()
}

// startOllama starts ollama serve at addr and waits until it answers. Its
// cleanup kills, by pid, any of its descendants that outlive it (a
// runner orphaned by a killed server).
func (e *engine) startOllama(ctx context.Context, t *testing.T, env []string, addr string) *process {
	t.Helper()
	p := startProcess(t, "ollama", e.home, env, e.ollama, "serve")
	t.Cleanup(func() { stopTree(p) })
	if err := poll(ctx, startTimeout, func() error { return httpOK(ctx, "http://"+addr+"/api/version") }); err != nil {
		fatalf(t, "ollama serve not answering: %v", err)
	}
	return p
}

// run is one check's processes: Ollama's server, and the proxy in front
// of it or wrapping it.
type run struct {
	e             *engine
	mode          string
	ollamaAddr    string
	api, admin    string
	proxy         *process
	serve         int // ollama serve's pid
	direct, proxd string
}

// check runs every Ollama check in one mode ("front" or "wrapper") under
// one proxy configuration.
func (e *engine) check(ctx context.Context, t *testing.T, mode string, pc proxyConfig) {
	p := freePorts(t, 3)
	r := &run{e: e, mode: mode, ollamaAddr: fmt.Sprintf("127.0.0.1:%d", p[0]),
		api: fmt.Sprintf("127.0.0.1:%d", p[1]), admin: fmt.Sprintf("127.0.0.1:%d", p[2])}
	r.direct, r.proxd = "http://"+r.ollamaAddr, "http://"+r.api
	env := e.ollamaEnv(r.ollamaAddr)
	args := append([]string{"-simulate", "-backend", r.direct, "-listen", r.api, "-admin-listen", r.admin,
		"-log-format", "json", "-log-level", "debug", "-log-requests",
		"-shutdown-delay", "0s", "-drain-timeout", "5m", "-backend-timeout", "5m"}, pc.args...)
	switch mode {
	case "front":
		r.serve = e.startOllama(ctx, t, env, r.ollamaAddr).cmd.Process.Pid
		r.proxy = startProcess(t, "proxy", e.root, env, e.proxy, args...)
	default:
		r.proxy = startProcess(t, "proxy", e.root, env, e.proxy, append(args, "--", e.ollama, "serve")...)
		err := poll(ctx, startTimeout, func() error {
			for _, l := range proxyLog(t, r.proxy) {
				if l.Msg == "backend started" && l.Pid > 0 {
					r.serve = l.Pid
					return nil
				}
			}
			return errors.New("no \"backend started\" line in the proxy's log")
		})
		if err != nil {
			fatal(t, err)
		}
		// The backend is the proxy's child, in a process group of its
		// own: whatever of it outlives the proxy is killed by group and
		// by pid.
		t.Cleanup(func() {
			desc := descendants(r.serve)
			r.proxy.stop()
			if syscall.Kill(-r.serve, 0) == nil {
				syscall.Kill(-r.serve, syscall.SIGKILL)
			}
			for _, d := range append(desc, r.serve) {
				if alive(d) {
					syscall.Kill(d, syscall.SIGKILL)
				}
			}
		})
	}
	if err := poll(ctx, startTimeout, func() error { return httpOK(ctx, "http://"+r.admin+"/readyz") }); err != nil {
		fatalf(t, "the proxy is not ready: %v", err)
	}

	t.Run("completions and the runner", r.completions)
	if pc.completionsOnly {
		return
	}
	t.Run("the runner restarted", r.restart)
	t.Run(fmt.Sprintf("%d concurrent streams for %v", soakStreams, soakDuration), r.soak)
	t.Run("a client that goes away", r.disconnect)
	t.Run("drain on SIGTERM", r.drain)
}

// completions: the basic completions through the proxy and directly, and
// the runner attributed from the first listing after the first answer.
func (r *run) completions(t *testing.T) {
	ctx := context.Background()
	proxied := r.driveOK(ctx, t, r.proxd, "basic")
	answered := time.Now()
	direct := r.driveOK(ctx, t, r.direct, "basic", "-trailers=false")
	if len(proxied) != len(direct) {
		fatalf(t, "%d completions through the proxy, %d directly", len(proxied), len(direct))
	}
	logged := map[string]logLine{}
	err := poll(ctx, eventWait, func() error {
		for _, l := range proxyLog(t, r.proxy) {
			if l.Msg == "request" && l.TraceID != "" {
				logged[l.TraceID] = l
			}
		}
		for _, c := range proxied {
			if _, ok := logged[c.TraceID]; !ok {
				return fmt.Errorf("no request line for %s (trace %s) in the proxy's log", c.Name, c.TraceID)
			}
		}
		return nil
	})
	if err != nil {
		fatal(t, err)
	}
	byName := map[string]driveLine{}
	for i, c := range proxied {
		d := direct[i]
		byName[c.Name] = c
		l := logged[c.TraceID]
		// Tokens: the proxy's count is Ollama's usage, and Ollama's usage
		// through the proxy is its usage without it.
		if l.OutputTokens != c.CompletionTokens || l.InputTokens != c.PromptTokens {
			errorf(t, "%s: the proxy logged %d input and %d output tokens; Ollama's usage says %d and %d", c.Name, l.InputTokens, l.OutputTokens, c.PromptTokens, c.CompletionTokens)
		}
		if d.Name != c.Name || d.PromptTokens != c.PromptTokens || d.CompletionTokens != c.CompletionTokens {
			errorf(t, "%s: usage %d+%d through the proxy, %s %d+%d directly", c.Name, c.PromptTokens, c.CompletionTokens, d.Name, d.PromptTokens, d.CompletionTokens)
		}
		if len(c.Body) > 0 || len(d.Body) > 0 {
			if err := sameButIDCreated(c.Body, d.Body); err != nil {
				errorf(t, "%s: the body through the proxy is not Ollama's own: %v", c.Name, err)
			}
		}
		t.Logf("%s: %d+%d tokens, %d chunks, %s mJ (approximate %s), %q…", c.Name, c.PromptTokens, c.CompletionTokens,
			c.Chunks, c.EnergyMJ, c.Approximate, c.Text[:min(len(c.Text), 24)])
	}
	// A stream's text is the whole response's, at temperature 0.
	for _, kind := range []string{"chat", "completion"} {
		if s, w := byName[kind+"-stream"].Text, byName[kind].Text; s != w {
			errorf(t, "%s: the streamed text %q differs from the whole response's %q", kind, s, w)
		}
	}

	runner := r.waitRunner(t, nil)
	r.waitAttributed(t, runner, nil, answered)
}

// restart: after an unload (keep_alive 0), the next request starts a new
// runner, attributed from the first listing after it answered; the old
// one has dropped out by then.
func (r *run) restart(t *testing.T) {
	ctx := context.Background()
	old := r.waitRunner(t, nil)
	body, code, err := httpPost(ctx, r.direct+"/api/generate", `{"model":"`+ollamaModel+`","keep_alive":0}`)
	if err != nil || code != 200 {
		fatalf(t, "unloading the model: %d %s %v", code, body, err)
	}
	if err := poll(ctx, eventWait, func() error {
		if alive(old) {
			return fmt.Errorf("runner %d still running after the unload", old)
		}
		return nil
	}); err != nil {
		fatal(t, err)
	}
	r.driveOK(ctx, t, r.proxd, "basic")
	answered := time.Now()
	runner := r.waitRunner(t, []int{old})
	r.waitAttributed(t, runner, []int{old}, answered)
}

// soak: soakStreams concurrent streams for soakDuration, without an error.
func (r *run) soak(t *testing.T) {
	lines := r.driveOK(context.Background(), t, r.proxd, "soak",
		"-streams", strconv.Itoa(soakStreams), "-duration", soakDuration.String())
	workers := map[int]int{}
	var tokens int64
	for _, l := range lines {
		workers[l.Worker]++
		tokens += l.CompletionTokens
	}
	t.Logf("%d streams of %d tokens in %v on %d workers, 0 errors (%d tokens)", len(lines), basicTokens, soakDuration, len(workers), tokens)
	if len(workers) != soakStreams {
		errorf(t, "streams ran on %d workers, want %d", len(workers), soakStreams)
	}
}

// disconnect: a client that goes away after three chunks is logged as
// such, and the proxy serves on.
func (r *run) disconnect(t *testing.T) {
	ctx := context.Background()
	lines := r.driveOK(ctx, t, r.proxd, "disconnect", "-long-tokens", strconv.Itoa(longTokens))
	gone := lines[0].TraceID
	err := poll(ctx, eventWait, func() error {
		for _, l := range proxyLog(t, r.proxy) {
			if l.Msg == "request" && l.TraceID == gone {
				if l.Level != "WARN" || l.Error != "the client went away" {
					return fmt.Errorf("the cut stream is logged at %s with error %q", l.Level, l.Error)
				}
				return nil
			}
		}
		return errors.New("no request line for the cut stream yet")
	})
	if err != nil {
		fatal(t, err)
	}
	r.driveOK(ctx, t, r.proxd, "basic")
}

// drain: SIGTERM while a stream is in flight lets it finish whole, then
// the proxy stops the backend's process group (wrapper) and exits.
func (r *run) drain(t *testing.T) {
	ctx := context.Background()
	d := startProcess(t, "ollamadrive-drain", "", nil, r.e.drive, "-url", r.proxd, "-model", ollamaModel,
		"-long-tokens", strconv.Itoa(longTokens), "drain")
	if err := poll(ctx, eventWait, func() error {
		if !strings.Contains(readFile(t, d.stdout), `"first_chunk"`) {
			return errors.New("the stream's first chunk has not come")
		}
		return nil
	}); err != nil {
		fatal(t, err)
	}
	runner := r.waitRunner(t, nil)
	if err := r.proxy.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		fatal(t, err)
	}
	exitErr := d.wait(ctx, driveWait)
	lines := driveLines(t, d)
	if exitErr != nil || len(lines) != 1 || lines[0].Error != "" {
		fatalf(t, "the stream in flight at SIGTERM: %v, %+v", exitErr, lines)
	}
	if err := r.proxy.wait(ctx, driveWait); err != nil && r.mode == "front" {
		errorf(t, "the proxy's exit: %v", err)
	}
	// The stream ended after the drain began: it was in flight.
	var draining, streamEnd int
	for i, l := range proxyLog(t, r.proxy) {
		switch {
		case l.Msg == "draining":
			draining = i
		case l.Msg == "request" && l.TraceID == lines[0].TraceID:
			streamEnd = i
		}
	}
	if draining == 0 || streamEnd < draining {
		errorf(t, "the drain began at log line %d, the stream ended at %d: it was not in flight", draining, streamEnd)
	}
	if r.mode == "wrapper" {
		for _, pid := range []int{r.serve, runner} {
			if alive(pid) {
				errorf(t, "pid %d (ollama serve or its runner) outlived the proxy", pid)
			}
		}
		if syscall.Kill(-r.serve, 0) == nil {
			errorf(t, "the backend's process group %d outlived the proxy", r.serve)
		}
	}
	t.Logf("a %d-token stream finished whole after SIGTERM; the proxy stopped (%s mode)", lines[0].CompletionTokens, r.mode)
}

// waitRunner waits for the one runner of ollama serve that is not in
// old, and returns its pid.
func (r *run) waitRunner(t *testing.T, old []int) int {
	t.Helper()
	var pid int
	err := poll(context.Background(), eventWait, func() error {
		var found []int
		for _, p := range children(r.serve) {
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); bytes.Contains(cmd, []byte("runner")) && !slices.Contains(old, p) {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			return fmt.Errorf("ollama serve (pid %d) has runners %v besides %v, want one", r.serve, found, old)
		}
		pid = found[0]
		return nil
	})
	if err != nil {
		fatal(t, err)
	}
	return pid
}

// waitAttributed checks the proxy's listings of the backend's processes
// (its debug lines, one per listing, stamped with when the listing
// began): every listing that began after the completion that started
// runner was answered names runner and none of gone, and one such listing
// comes within eventWait.
func (r *run) waitAttributed(t *testing.T, runner int, gone []int, answered time.Time) {
	t.Helper()
	var after int
	err := poll(context.Background(), eventWait, func() error {
		after = 0
		for _, l := range proxyLog(t, r.proxy) {
			if l.Msg != "listed the backend's processes" || l.Began.Before(answered) {
				continue
			}
			after++
			if !slices.Contains(l.AttributedPIDs, runner) || !slices.Contains(l.AttributedPIDs, r.serve) {
				return fmt.Errorf("the listing that began at %v attributes %v, without ollama serve %d or its runner %d, started before %v",
					l.Began, l.AttributedPIDs, r.serve, runner, answered)
			}
			for _, g := range gone {
				if slices.Contains(l.AttributedPIDs, g) {
					return fmt.Errorf("the listing that began at %v attributes %v, with %d, which has exited", l.Began, l.AttributedPIDs, g)
				}
			}
		}
		if after == 0 {
			return errors.New("no listing of the backend's processes since the runner answered")
		}
		return nil
	})
	if err != nil {
		fatal(t, err)
	}
	t.Logf("runner %d attributed in each of the %d listings since it answered", runner, after)
}

// driveOK runs ollamadrive against base and fails the test unless every
// completion is good; it returns the completions' lines.
func (r *run) driveOK(ctx context.Context, t *testing.T, base string, args ...string) []driveLine {
	t.Helper()
	scenario := args[0]
	args = append([]string{"-url", base, "-model", ollamaModel, "-max-tokens", strconv.Itoa(basicTokens)}, append(args[1:], scenario)...)
	d := startProcess(t, "ollamadrive-"+scenario, "", nil, r.e.drive, args...)
	exitErr := d.wait(ctx, driveWait)
	d.stop()
	lines := driveLines(t, d)
	var failed []string
	for _, l := range lines {
		if l.Error != "" {
			failed = append(failed, fmt.Sprintf("%s: %s", l.Name, l.Error))
		}
	}
	if exitErr != nil || len(failed) > 0 || len(lines) == 0 {
		fatalf(t, "ollamadrive %s against %s: %v; %d of %d completions failed: %s\n%s", scenario, base, exitErr, len(failed), len(lines),
			strings.Join(failed[:min(len(failed), 5)], "; "), tail(d.stderr, 10))
	}
	return lines
}

// driveLine is one completion as ollamadrive printed it.
type driveLine struct {
	Event            string          `json:"event"`
	Name             string          `json:"name"`
	Worker           int             `json:"worker"`
	TraceID          string          `json:"trace_id"`
	Status           int             `json:"status"`
	PromptTokens     int64           `json:"prompt_tokens"`
	CompletionTokens int64           `json:"completion_tokens"`
	Chunks           int             `json:"chunks"`
	Text             string          `json:"text"`
	Body             json.RawMessage `json:"body"`
	EnergyMJ         string          `json:"energy_millijoules"`
	Approximate      string          `json:"energy_approximate"`
	Error            string          `json:"error"`
}

// driveLines returns the completions' lines of a finished ollamadrive,
// events left out.
func driveLines(t *testing.T, d *process) []driveLine {
	t.Helper()
	var out []driveLine
	for line := range strings.Lines(readFile(t, d.stdout)) {
		var l driveLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			fatalf(t, "ollamadrive's line %q: %v", line, err)
		}
		if l.Event == "" {
			out = append(out, l)
		}
	}
	return out
}

// logLine is the part of a line of the proxy's JSON log the checks read.
type logLine struct {
	Time           time.Time `json:"time"`
	Level          string    `json:"level"`
	Msg            string    `json:"msg"`
	Pid            int       `json:"pid"`
	TraceID        string    `json:"trace_id"`
	InputTokens    int64     `json:"input_tokens"`
	OutputTokens   int64     `json:"output_tokens"`
	Error          string    `json:"error"`
	AttributedPIDs []int     `json:"attributed_pids"`
	Began          time.Time `json:"began"`
}

// proxyLog returns the proxy's log lines so far, from its stderr; lines
// that are not its JSON (the wrapped backend's, which share its stderr)
// are skipped.
func proxyLog(t *testing.T, p *process) []logLine {
	t.Helper()
	var out []logLine
	for line := range strings.Lines(readFile(t, p.stderr)) {
		var l logLine
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &l) != nil || l.Msg == "" {
			continue
		}
		out = append(out, l)
	}
	return out
}

// sameButIDCreated reports how two JSON bodies differ, but in their
// top-level id and created, which each response has of its own; nil when
// they do not. Numbers compare as their text, so that 0.1 and 0.10 differ
// as bytes would.
func sameButIDCreated(a, b []byte) error {
	parse := func(body []byte) (map[string]any, error) {
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			return nil, fmt.Errorf("%w in %q", err, body)
		}
		delete(m, "id")
		delete(m, "created")
		return m, nil
	}
	ma, err := parse(a)
	if err != nil {
		return err
	}
	mb, err := parse(b)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(ma, mb) {
		ja, _ := json.Marshal(ma)
		jb, _ := json.Marshal(mb)
		return fmt.Errorf("\n\t%s\nand\n\t%s", ja, jb)
	}
	return nil
}

func TestSameButIDCreated(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		same bool
	}{
		{`{"id":"a","created":1,"x":[1,{"y":"z"}]}`, `{"x":[1,{"y":"z"}],"created":2,"id":"b"}`, true},
		{`{"id":"a","x":1}`, `{"id":"a","x":2}`, false},
		{`{"x":0.1}`, `{"x":0.10}`, false},
		{`{"x":{"id":"nested ids count"}}`, `{"x":{"id":"other"}}`, false},
		{`{"x":1}`, `{"x":1,"usage":null}`, false},
		{`{"x":1}`, `not json`, false},
	} {
		if err := sameButIDCreated([]byte(tt.a), []byte(tt.b)); (err == nil) != tt.same {
			t.Errorf("sameButIDCreated(%s, %s) = %v, want same %v", tt.a, tt.b, err, tt.same)
		}
	}
}

// children returns the pids whose parent is pid, from /proc.
func children(pid int) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		fields := strings.Fields(s[i+1:])
		if i < 0 || len(fields) < 2 {
			continue
		}
		if pp, _ := strconv.Atoi(fields[1]); pp == pid {
			p, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, p)
		}
	}
	return out
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

// descendants returns pid's descendants, from /proc.
func descendants(pid int) []int {
	var out []int
	for _, c := range children(pid) {
		out = append(append(out, c), descendants(c)...)
	}
	return out
}

// stopTree stops p, and then kills by pid those of the descendants it had
// before that still run: a runner its server left behind.
func stopTree(p *process) {
	desc := descendants(p.cmd.Process.Pid)
	p.stop()
	for _, d := range desc {
		if alive(d) {
			syscall.Kill(d, syscall.SIGKILL)
		}
	}
}

// httpPost posts a JSON body to u within a minute.
func httpPost(ctx context.Context, u, body string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, resp.StatusCode, err
}
