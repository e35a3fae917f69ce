// Package proxy is otelenergy-proxy: everything but the process's own
// signals and streams, so that tests run it in-process.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
	"github.com/otelenergy/otelenergy/internal/cli"
	"github.com/otelenergy/otelenergy/internal/doctor"
)

// Env is what the proxy takes from its process.
type Env struct {
	Stdout, Stderr io.Writer
	// LookupEnv reads the environment, as os.LookupEnv (the OTELENERGY_*
	// and OTEL_* variables). Nil reads an empty environment.
	LookupEnv func(string) (string, bool)
	// Signals delivers SIGTERM and SIGINT: the first drains and exits,
	// a second means stop now.
	Signals <-chan os.Signal
	// ProcRoot is where the proc file system is mounted; empty is /proc.
	ProcRoot string
	// Started, when set, is called once the API and admin addresses
	// serve, with their addresses (tests listen on port 0).
	Started func(api, admin net.Addr)
	// After is the clock of -shutdown-delay; nil is time.After.
	After func(time.Duration) <-chan time.Time
}

// Exit statuses besides a wrapped child's own.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// DoctorCommand, as the first argument, checks the node instead of
// proxying: the NVML library and driver, each board's energy counter and
// the exporter's endpoint, each failure with a one-line fix (package
// internal/doctor, shared with otelenergy-agent).
const DoctorCommand = "doctor"

// Main runs the proxy with args (without the program name) and returns
// the process's exit status: 2 for an invalid flag, 1 when the proxy
// cannot start, the child's status in wrapper mode, else 0.
func Main(args []string, env Env) int {
	if env.LookupEnv == nil {
		env.LookupEnv = func(string) (string, bool) { return "", false }
	}
	if env.ProcRoot == "" {
		env.ProcRoot = "/proc"
	}
	if len(args) > 0 && args[0] == DoctorCommand {
		// The proxy meters the boards its backend uses from the backend's
		// own container, which need not share the host's PID namespace.
		return doctor.Main(context.Background(), append([]string{"-any-pid-namespace"}, args[1:]...), env.Stdout, env.Stderr, env.LookupEnv)
	}
	getenv := func(k string) string { v, _ := env.LookupEnv(k); return v }
	cfg, err := flags.Parse(args, getenv, env.Stdout)
	switch {
	case errors.Is(err, flags.ErrHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(env.Stderr, "otelenergy-proxy: %v\n", err)
		return exitUsage
	}
	build := cli.ReadBuild()
	if cfg.Version {
		fmt.Fprintln(env.Stdout, build)
		return exitOK
	}
	if cfg.CopyTo != "" {
		if err := copySelf(cfg.CopyTo); err != nil {
			fmt.Fprintf(env.Stderr, "otelenergy-proxy: -copy-to: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	log := cli.Logging{Level: cfg.LogLevel, Format: cfg.LogFormat}.NewLogger(env.Stderr)
	log.Info("otelenergy-proxy starting", slog.Any("build", build))
	code, err := run(cfg, log, env)
	if err != nil {
		log.Error("otelenergy-proxy failed", slog.Any("error", err))
		if code == exitOK {
			code = exitFailure
		}
	}
	return code
}

// copySelf copies the running executable to path, executable by all.
func copySelf(path string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
