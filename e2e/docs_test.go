package e2e

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// docsNetnsEnv marks TestDocs re-run inside a network namespace of its
// own, where the documented fixed ports (8080, 8088, 4317, 9090, ...)
// are free whatever else runs on the machine.
const docsNetnsEnv = "OTELENERGY_DOCS_NETNS"

// docsBinEnv passes the binaries the parent built to the re-run.
const docsBinEnv = "OTELENERGY_DOCS_BIN"

// docsNoBackendsEnv, set, leaves out the blocks that need Jaeger or
// Prometheus 3.
const docsNoBackendsEnv = "OTELENERGY_DOCS_NO_BACKENDS"

func noBackends() bool { return os.Getenv(docsNoBackendsEnv) != "" }

const (
	docDefaultTimeout = 3 * time.Minute
	docStopGrace      = 30 * time.Second // the agent's and proxy's own shutdowns are bounded below this
	docPollEvery      = 500 * time.Millisecond
)

// TestDocsMarked checks, with no backend, that every shell block of
// README.md and docs/*.md says how TestDocs runs it or why it does not,
// that every marker parses, and that every command in the text is run by
// a block or declared with its reason; it logs the inventory of what is
// not run, by kind.
func TestDocsMarked(t *testing.T) {
	summarize(t)
	root, err := filepath.Abs("..")
	if err != nil {
		fatal(t, err)
	}
	docs, err := loadDocs(root)
	if err != nil {
		fatal(t, err)
	}
	runs := map[string]bool{} // the commands blocks run, normalized
	var blocks, commands int
	notRun := map[string][]string{}
	for _, d := range docs {
		for _, b := range d.blocks {
			blocks++
			for _, p := range b.check() {
				errorf(t, "%s: %s", b.where, p)
			}
			if b.mark == nil {
				continue
			}
			if b.mark.skip != nil {
				notRun[b.mark.skip.kind] = append(notRun[b.mark.skip.kind], fmt.Sprintf("%s (%s)", b.where, b.mark.skip.reason))
				continue
			}
			for i, c := range b.cmds {
				if sp := b.spec(i + 1); sp.skip != nil {
					notRun[sp.skip.kind] = append(notRun[sp.skip.kind], fmt.Sprintf("%s:%d %s (%s)", b.doc, c.line, firstLine(c.text), sp.skip.reason))
					continue
				}
				commands++
				runs[normalize(c.code)] = true
			}
		}
	}
	for _, d := range docs {
		for _, in := range d.inline {
			if covered(in.text, runs) {
				continue
			}
			k := slices.IndexFunc(d.declare, func(x docInline) bool { return x.text == in.text })
			if k < 0 {
				errorf(t, "%s:%d: the command `%s` is run by no marked block and not declared (<!-- docrun inline KIND: ... -->)", d.path, in.line, in.text)
				continue
			}
			if !slices.Contains(docSkipKinds, d.declare[k].kind) {
				errorf(t, "%s:%d: inline kind %q: want one of %v", d.path, d.declare[k].line, d.declare[k].kind, docSkipKinds)
			}
			notRun[d.declare[k].kind] = append(notRun[d.declare[k].kind], fmt.Sprintf("%s:%d `%s`", d.path, in.line, in.text))
		}
		for _, dc := range d.declare {
			if !slices.ContainsFunc(d.inline, func(x docInline) bool { return x.text == dc.text }) {
				errorf(t, "%s:%d: declares `%s`, which the text does not hold", d.path, dc.line, dc.text)
			}
		}
	}
	t.Logf("%d shell blocks in %d documents; %d commands run by TestDocs", blocks, len(docs), commands)
	kinds := mapKeys(notRun)
	slices.Sort(kinds)
	for _, k := range kinds {
		t.Logf("not run, %s (%d):\n\t%s", k, len(notRun[k]), strings.Join(notRun[k], "\n\t"))
	}
}

// covered reports whether an inline command is one a block runs: the
// same words, possibly with more before them (a variable, a path: bin/,
// go run ./cmd/) or flags after them.
func covered(cmd string, runs map[string]bool) bool {
	re := regexp.MustCompile(`(^|[ /])` + regexp.QuoteMeta(cmd) + `( -|$)`)
	for r := range runs {
		if re.MatchString(r) {
			return true
		}
	}
	return false
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestDocs runs every marked command of README.md and docs/*.md as a
// reader would, one shell session per document, and checks that each
// prints what its marker says the document says it prints. It runs in a
// network namespace of its own where unshare can make one, so that the
// documents' fixed ports are free; else on this host's, where a port
// another process holds fails its command. With -short it does not run;
// with OTELENERGY_DOCS_NO_BACKENDS set, the blocks that need Jaeger or
// Prometheus 3 (15 to 40 minutes to build cold) are not run.
func TestDocs(t *testing.T) {
	summarize(t)
	if testing.Short() {
		t.Skip("runs every documented command: builds and starts the binaries (scripts/docs.sh)")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		fatal(t, err)
	}
	if out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		headRev = strings.TrimSpace(string(out))[:12]
		revisionRE = `\(revision ` + headRev
	}
	if fi, err := os.Stat(filepath.Join(root, ".git")); err == nil && !fi.IsDir() {
		revisionRE = `\(revision unknown: no commit recorded`
		t.Logf("%s is a git worktree: go build -buildvcs=true records no commit there, and -version is checked to say so", root)
	}
	docs, err := loadDocs(root)
	if err != nil {
		fatal(t, err)
	}
	binDir := os.Getenv(docsBinEnv)
	if os.Getenv(docsNetnsEnv) == "" {
		binDir = docsPrebuild(t, root, docs)
		if netnsUsable() {
			reexecInNetns(t, binDir)
			return
		}
		t.Log("unshare cannot make a network namespace here: the documents' commands run on this host's network, and a port another process holds fails its command")
	}
	for _, d := range docs {
		if !slices.ContainsFunc(d.blocks, func(b *docBlock) bool { return runnable(b) }) {
			continue
		}
		t.Run(d.path, func(t *testing.T) {
			s := newDocSession(t, root, binDir)
			defer s.close()
			for _, b := range d.blocks {
				if !runnable(b) {
					continue
				}
				if len(b.mark.needs) > 0 && noBackends() {
					t.Logf("%s: needs %v; not run with %s set", b.where, b.mark.needs, docsNoBackendsEnv)
					continue
				}
				if !s.runBlock(b) {
					return // later blocks build on this one
				}
			}
		})
	}
}

// runnable reports whether b has something TestDocs runs.
func runnable(b *docBlock) bool {
	return b.mark != nil && b.mark.skip == nil && len(b.check()) == 0
}

// docsPrebuild builds what the documents' commands build or run, so that
// inside the namespace (which has no network) nothing needs a download
// and go run only links: the binaries on the documents' PATH (as
// README.md builds them), the examples, and Jaeger and Prometheus 3 when
// a block needs them and -short is off.
func docsPrebuild(t *testing.T, root string, docs []*docDoc) string {
	t.Helper()
	ctx := budgetContext(t, buildTimeout+5*time.Minute)
	binDir := filepath.Join(t.TempDir(), "bin")
	env := readerEnv()
	if err := runCommand(ctx, buildTimeout, root, env, "go", "build", "-buildvcs=true", "-o", binDir+"/", "./cmd/otelenergy-proxy", "./cmd/otelenergy-agent"); err != nil {
		fatalf(t, "build the binaries: %v", err)
	}
	if err := runCommand(ctx, buildTimeout, root, env, "go", "build", "./example/...", "./internal/nvmlsource/"); err != nil {
		fatalf(t, "build the examples: %v", err)
	}
	if err := runCommand(ctx, buildTimeout, root, env, "go", "test", "-count=1", "-run", "^$", "./internal/nvmlsource/"); err != nil {
		fatalf(t, "build the nvmlsource tests: %v", err)
	}
	needs := map[string]bool{}
	for _, d := range docs {
		for _, b := range d.blocks {
			if b.mark != nil {
				for _, n := range b.mark.needs {
					needs[n] = true
				}
			}
		}
	}
	if !noBackends() && (needs["jaeger"] || needs["prometheus3"]) {
		_, e2eBin := repoDirs(t)
		buildAll(ctx, t, backendBuilds(root, filepath.Join(e2eBin, "jaeger"), filepath.Join(e2eBin, "prometheus3")))
		if err := os.Symlink(filepath.Join(e2eBin, "prometheus3"), filepath.Join(binDir, "prometheus")); err != nil {
			fatal(t, err)
		}
	}
	return binDir
}

// netnsUsable reports whether unshare can make a network namespace with
// its loopback up.
func netnsUsable() bool {
	return exec.Command("unshare", "-rn", "sh", "-c", "ip link set lo up").Run() == nil
}

// reexecInNetns runs TestDocs again in a network namespace of its own,
// and reports its outcome as t's.
func reexecInNetns(t *testing.T, binDir string) {
	t.Helper()
	run := "^TestDocs$"
	if f := flag.Lookup("test.run"); f != nil && strings.HasPrefix(f.Value.String(), "TestDocs/") {
		run = f.Value.String() // one document, from scripts/docs.sh -run
	}
	args := []string{"-rn", "sh", "-c", `ip link set lo up && exec "$@"`, "sh", os.Args[0],
		"-test.run", run, "-test.v", "-test.timeout", "0"}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), docsNetnsEnv+"=1", docsBinEnv+"="+binDir)
	pr, pw, err := os.Pipe()
	if err != nil {
		fatal(t, err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fatal(t, err)
	}
	pw.Close()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var fails []string
	for sc.Scan() {
		l := sc.Text()
		t.Log(l)
		if strings.Contains(l, "--- FAIL") {
			fails = append(fails, strings.TrimSpace(l))
		}
	}
	if err := cmd.Wait(); err != nil {
		fatalf(t, "TestDocs in its network namespace: %v; failed: %s", err, strings.Join(fails, "; "))
	}
}

// docSession is one document's shell: its background jobs, numbered as
// bash numbers them, and the files its blocks wrote.
type docSession struct {
	t      *testing.T
	root   string
	env    []string
	jobs   []*docJob // live jobs, in start order
	hidden []*docJob // setup-bg jobs
	files  []string
	logDir string
}

// docJob is a started command.
type docJob struct {
	n     int // its job number; 0 for a foreground or hidden one
	where string
	cmd   *exec.Cmd
	out   *lockedBuf
	done  chan struct{}
	spec  *docSpec
}

// lockedBuf is a buffer safe for a process's writes and a test's reads.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// readerEnv is the environment a reader's shell has: this process's,
// without the OpenTelemetry and otelenergy variables, and without the
// GOWORK=off the e2e module runs under (the documents' commands run in the
// root's workspace).
func readerEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "OTEL_") || strings.HasPrefix(kv, "OTELENERGY_") || strings.HasPrefix(kv, "GOWORK=")
	})
}

func newDocSession(t *testing.T, root, binDir string) *docSession {
	env := slices.DeleteFunc(readerEnv(), func(kv string) bool { return strings.HasPrefix(kv, "PATH=") })
	env = append(env, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return &docSession{t: t, root: root, env: env, logDir: t.TempDir()}
}

// start starts code in bash, in a process group of its own.
func (s *docSession) start(where, code string, sp *docSpec) (*docJob, error) {
	j := &docJob{where: where, out: &lockedBuf{}, done: make(chan struct{}), spec: sp}
	j.cmd = exec.Command("bash", "-c", code)
	j.cmd.Dir, j.cmd.Env = s.root, s.env
	j.cmd.Stdout, j.cmd.Stderr = j.out, j.out
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := j.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		j.cmd.Wait()
		close(j.done)
	}()
	return j, nil
}

// stop signals j's process group, waits for it, and kills the group if it
// outlives docStopGrace; it reports whether the group stopped on the
// signal.
func (j *docJob) stop(sig syscall.Signal) bool {
	select {
	case <-j.done:
		return true
	default:
	}
	syscall.Kill(-j.cmd.Process.Pid, sig)
	select {
	case <-j.done:
		return true
	case <-time.After(docStopGrace):
		syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
		<-j.done
		return false
	}
}

func (j *docJob) exitCode() int { return j.cmd.ProcessState.ExitCode() }

// poll runs shell every docPollEvery until its output matches re, j ends,
// or ctx does; it reports whether it matched.
func (s *docSession) poll(ctx context.Context, p *docPoll, j *docJob) bool {
	for {
		pc, cancel := context.WithTimeout(ctx, 10*time.Second)
		c := exec.CommandContext(pc, "bash", "-c", p.shell)
		c.Dir, c.Env = s.root, s.env
		out, _ := c.CombinedOutput()
		cancel()
		if p.re.Match(out) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-j.done:
			return false
		case <-time.After(docPollEvery):
		}
	}
}

// waitOutput waits until j's output matches re, j ends, or ctx does.
func waitOutput(ctx context.Context, j *docJob, re *regexp.Regexp) bool {
	for {
		if re.MatchString(j.out.String()) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-j.done:
			return re.MatchString(j.out.String())
		case <-time.After(docPollEvery / 5):
		}
	}
}

// runBlock runs one block; it reports whether the session can go on.
func (s *docSession) runBlock(b *docBlock) bool {
	t := s.t
	if b.mark.file != "" {
		path := filepath.Join(s.root, b.mark.file)
		if err := os.WriteFile(path, []byte(b.body), 0o644); err != nil {
			errorf(t, "%s: %v", b.where, err)
			return false
		}
		s.files = append(s.files, path)
		t.Logf("%s: wrote %s", b.where, b.mark.file)
		return true
	}
	for _, c := range b.mark.setup {
		j, err := s.start(b.where+" setup", c, &docSpec{})
		if err == nil {
			select {
			case <-j.done:
			case <-time.After(docDefaultTimeout):
				j.stop(syscall.SIGKILL)
			}
		}
		if err != nil || j.exitCode() != 0 {
			errorf(t, "%s: setup %q failed: %v\n%s", b.where, c, err, lastBytes([]byte(j.out.String()), 2000))
			return false
		}
	}
	for _, p := range b.mark.setupBg {
		j, err := s.start(b.where+" setup-bg", p.run, &docSpec{})
		if err != nil {
			errorf(t, "%s: setup-bg %q: %v", b.where, p.run, err)
			return false
		}
		s.hidden = append(s.hidden, j)
		ctx, cancel := context.WithTimeout(context.Background(), docDefaultTimeout)
		ok := s.poll(ctx, &p, j)
		cancel()
		if !ok {
			errorf(t, "%s: setup-bg %q never ready (%q => %s):\n%s", b.where, p.run, p.shell, p.re, lastBytes([]byte(j.out.String()), 2000))
			return false
		}
	}
	for i, c := range b.cmds {
		sp := b.spec(i + 1)
		where := fmt.Sprintf("%s:%d", b.doc, c.line)
		if sp.skip != nil {
			t.Logf("%s: not run (%s: %s): %s", where, sp.skip.kind, sp.skip.reason, firstLine(c.text))
			continue
		}
		if len(c.kill) > 0 {
			if !s.kill(where, c.kill) {
				return false
			}
			continue
		}
		if !s.runCommand(where, c, sp) {
			return false
		}
	}
	return true
}

// runCommand runs one command as its spec says; it reports whether the
// session can go on.
func (s *docSession) runCommand(where string, c docCmd, sp *docSpec) bool {
	t := s.t
	timeout := cmpDuration(sp.timeout, docDefaultTimeout)
	start := time.Now()
	j, err := s.start(where, c.code, sp)
	if err != nil {
		errorf(t, "%s: %v", where, err)
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if c.bg || sp.bg {
		j.n = 1
		for _, o := range s.jobs {
			j.n = max(j.n, o.n+1)
		}
		s.jobs = append(s.jobs, j)
		if sp.ready != nil && !s.poll(ctx, sp.ready, j) {
			errorf(t, "%s: [%d] never ready (%q => %s) within %v:\n%s", where, j.n, sp.ready.shell, sp.ready.re, timeout, lastBytes([]byte(j.out.String()), 3000))
			return false
		}
		t.Logf("%s: [%d] started in the background: %s", where, j.n, firstLine(c.text))
		return true
	}
	interrupted := false
	switch {
	case sp.until != nil || sp.untilC != nil:
		ok := false
		if sp.until != nil {
			ok = waitOutput(ctx, j, sp.until)
		}
		if sp.untilC != nil && (sp.until == nil || ok) {
			ok = s.poll(ctx, sp.untilC, j)
		}
		if !ok {
			select {
			case <-j.done:
				errorf(t, "%s: exited (%d) before what it should print:\n%s", where, j.exitCode(), lastBytes([]byte(j.out.String()), 3000))
			default:
				j.stop(syscall.SIGKILL)
				errorf(t, "%s: did not print what it should within %v:\n%s", where, timeout, lastBytes([]byte(j.out.String()), 3000))
			}
			return false
		}
		interrupted = true
		if !j.stop(syscall.SIGINT) {
			errorf(t, "%s: did not stop within %v of SIGINT", where, docStopGrace)
		}
	default:
		select {
		case <-j.done:
		case <-ctx.Done():
			j.stop(syscall.SIGKILL)
			errorf(t, "%s: still running after %v:\n%s", where, timeout, lastBytes([]byte(j.out.String()), 3000))
			return false
		}
	}
	out := j.out.String()
	s.saveLog(where, out)
	ok := checkOutput(t, where, out, sp)
	want := sp.exit
	switch {
	case want != nil:
	case interrupted && goRun.MatchString(normalize(c.code)):
		want = []int{0, 1} // go run's own 1, when an idle build worker saw the signal
	default:
		want = []int{0}
	}
	if code := j.exitCode(); !slices.Contains(want, code) {
		errorf(t, "%s: exit status %d, want %v:\n%s", where, code, want, lastBytes([]byte(out), 3000))
		ok = false
	}
	how := "ran"
	if interrupted {
		how = "ran, interrupted once it had printed what it should,"
	}
	t.Logf("%s: %s in %v, exit %d: %s", where, how, time.Since(start).Round(100*time.Millisecond), j.exitCode(), firstLine(c.text))
	return ok
}

// goRun matches a command that go run runs, after its variables.
var goRun = regexp.MustCompile(`^(?:[A-Z][A-Z0-9_]*=\S*\s+)*go run `)

// kill stops the jobs a "kill %N" line names, with SIGTERM as bash's
// kill sends, and checks what they printed.
func (s *docSession) kill(where string, ns []int) bool {
	ok := true
	for _, n := range ns {
		k := slices.IndexFunc(s.jobs, func(j *docJob) bool { return j.n == n })
		if k < 0 {
			errorf(s.t, "%s: kill %%%d: no such job", where, n)
			ok = false
			continue
		}
		j := s.jobs[k]
		s.jobs = slices.Delete(s.jobs, k, k+1)
		j.stop(syscall.SIGTERM)
		out := j.out.String()
		s.saveLog(j.where, out)
		ok = checkOutput(s.t, j.where, out, j.spec) && ok
		s.t.Logf("%s: kill %%%d: the job of %s stopped", where, n, j.where)
	}
	return ok
}

// close stops the session's jobs and removes its files.
func (s *docSession) close() {
	for _, j := range slices.Backward(s.jobs) {
		j.stop(syscall.SIGINT)
		out := j.out.String()
		s.saveLog(j.where, out)
		checkOutput(s.t, j.where, out, j.spec)
	}
	for _, j := range s.hidden {
		j.stop(syscall.SIGINT)
	}
	for _, f := range s.files {
		os.Remove(f)
	}
}

// saveLog keeps a command's whole output beside the test's, for a failure.
func (s *docSession) saveLog(where, out string) {
	name := strings.NewReplacer("/", "_", ":", "_").Replace(where) + ".log"
	os.WriteFile(filepath.Join(s.logDir, name), []byte(out), 0o644)
}

// checkOutput checks out against sp's expectations.
func checkOutput(t *testing.T, where, out string, sp *docSpec) bool {
	ok := true
	for _, re := range sp.expect {
		if !re.MatchString(out) {
			errorf(t, "%s: the output does not match %s:\n%s", where, re, lastBytes([]byte(out), 3000))
			ok = false
		}
	}
	for _, c := range sp.counts {
		if n := len(c.re.FindAllStringIndex(out, -1)); n < c.n {
			errorf(t, "%s: %s matches %d times, want at least %d:\n%s", where, c.re, n, c.n, lastBytes([]byte(out), 3000))
			ok = false
		}
	}
	for _, r := range sp.ranges {
		vals := numbersAfter(out, r.key)
		if len(vals) == 0 {
			errorf(t, "%s: no %s= in the output", where, r.key)
			ok = false
			continue
		}
		med := vals[len(vals)/2]
		if med < r.lo || med > r.hi {
			errorf(t, "%s: the median %s is %g (of %d), want %g to %g, as the document shows", where, r.key, med, len(vals), r.lo, r.hi)
			ok = false
		} else {
			t.Logf("%s: the median %s is %g (of %d), within %g to %g", where, r.key, med, len(vals), r.lo, r.hi)
		}
	}
	return ok
}

// numbersAfter returns, sorted, every number that follows key= in out.
func numbersAfter(out, key string) []float64 {
	re := regexp.MustCompile(regexp.QuoteMeta(key) + `=(-?[0-9]+(?:\.[0-9]+)?)`)
	var vals []float64
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil && !math.IsNaN(v) {
			vals = append(vals, v)
		}
	}
	sort.Float64s(vals)
	return vals
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
