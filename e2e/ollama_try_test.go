package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/e2e/internal/gguf"
)

// tryHeading is the section of docs/proxy.md and README.md whose commands
// TestTryItWithARealEngine runs.
const tryHeading = "# Try it with a real engine"

// TestTryItWithARealEngine runs the second block of docs/proxy.md's "Try
// it with a real engine", the one that serves and asks, as it is written,
// on free ports instead of its own, in a directory whose bin/ holds the
// binaries this module's build makes (the first block's commands are
// those of ollamaBuild) and the tiny model; README.md must show the same
// blocks. The stream must end at max_tokens with the energy trailers, and
// the proxy must log Ollama's token count and the runner it attributes.
func TestTryItWithARealEngine(t *testing.T) {
	summarize(t)
	if testing.Short() {
		t.Skip("end-to-end test: builds Ollama and runs it")
	}
	ctx := budgetContext(t, ollamaBudget)
	root, binDir := repoDirs(t)
	docBlocks := tryBlocks(t, filepath.Join(root, "docs", "proxy.md"))
	readmeBlocks := tryBlocks(t, filepath.Join(root, "README.md"))
	if len(docBlocks) != 2 || strings.Join(docBlocks, "\n") != strings.Join(readmeBlocks, "\n") {
		fatalf(t, "docs/proxy.md has %d blocks under %q and README.md %d; want the same two", len(docBlocks), tryHeading, len(readmeBlocks))
	}
	ollama, proxy := filepath.Join(binDir, "ollama"), filepath.Join(binDir, "otelenergy-proxy")
	buildAll(ctx, t, []goBuild{
		ollamaBuild(root, ollama),
		{"proxy", filepath.Join(root, "cmd", "otelenergy-proxy"), append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work")), []string{"-o", proxy, "."}, nil},
	})

	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		fatal(t, err)
	}
	for name, target := range map[string]string{"ollama": ollama, "otelenergy-proxy": proxy} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			fatal(t, err)
		}
	}
	f, err := os.Create(filepath.Join(bin, "tiny.gguf"))
	if err != nil {
		fatal(t, err)
	}
	if err := gguf.Write(f, gguf.TinyLlama(1)); err != nil {
		fatal(t, err)
	}
	f.Close()

	script := docBlocks[1]
	p := freePorts(t, 3)
	for i, port := range []string{"11434", "8088", "8089"} {
		script = strings.ReplaceAll(script, "127.0.0.1:"+port, fmt.Sprintf("127.0.0.1:%d", p[i]))
	}
	env := withoutEnv(os.Environ(), "OLLAMA_", "OTEL_", "HOME=")
	env = append(env, "HOME="+work)

	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute) // a generous bound only a broken run reaches
	defer cancel()
	cmd := exec.CommandContext(rctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = work, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The script and its background proxy share a process group: a run
	// cut short kills both by it; Ollama, the proxy's child, dies with
	// the proxy, and its runner by pid (markedBy).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = stopGrace
	t.Cleanup(func() { killMarked("HOME=" + work) })
	err = cmd.Run()
	text := out.String()
	if err != nil {
		fatalf(t, "the commands failed: %v\n%s", err, lastBytes(out.Bytes(), 4000))
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`"finish_reason":"length"`),
		regexp.MustCompile(`data: \[DONE\]`),
		regexp.MustCompile(`(?i)energy-millijoules: ?\d+`),
		regexp.MustCompile(`(?i)energy-approximate: ?(true|false)`),
		regexp.MustCompile(`msg=request .*output_tokens=20`),
		regexp.MustCompile(`msg="the backend's processes" .*added=\[\d+\]`),
	} {
		if !want.MatchString(text) {
			errorf(t, "the output lacks %s:\n%s", want, lastBytes(out.Bytes(), 4000))
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("the commands of %q ran: %d bytes of output", tryHeading, len(text))
}

// tryBlocks returns the sh blocks of path's "Try it with a real engine"
// section, in order.
func tryBlocks(t *testing.T, path string) []string {
	t.Helper()
	doc := readFile(t, path)
	i := strings.Index(doc, tryHeading)
	if i < 0 {
		fatalf(t, "%s has no %q section", path, tryHeading)
	}
	sec := doc[i+len(tryHeading):]
	if j := regexp.MustCompile(`\n#{1,3} `).FindStringIndex(sec); j != nil {
		sec = sec[:j[0]]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(sec, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// withoutEnv returns env less the variables with any of prefixes (a
// prefix ending in "=" names one variable).
func withoutEnv(env []string, prefixes ...string) []string {
	var out []string
	for _, kv := range env {
		keep := true
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// killMarked kills, by pid, every process whose environment holds the
// variable kv: what a test started and what that started in turn, which
// inherited it, however it was reparented.
func killMarked(kv string) {
	environs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, f := range environs {
		b, err := os.ReadFile(f)
		if err != nil || !hasEnv(b, kv) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(f)), "%d", &pid); err == nil && pid != os.Getpid() {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				continue
			}
		}
	}
}

func hasEnv(environ []byte, kv string) bool {
	for _, v := range bytes.Split(environ, []byte{0}) {
		if string(v) == kv {
			return true
		}
	}
	return false
}
