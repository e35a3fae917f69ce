// Command otelenergy-agent meters the GPU energy of every compute process
// on a node and exports it over OTLP: run one per node. It reads each
// board's energy counter through the otelenergy library (NVML), splits
// each counter interval into the board's static part
// (otelenergy.energy.idle), the processes' shares by SM utilization
// (otelenergy.process.energy, with container.id and k8s.pod.uid from the
// process's cgroup) and what no process can be given
// (otelenergy.energy.unattributed), and exports hw.energy and hw.power per
// board. docs/agent.md describes the split, MIG, vGPU and containers.
//
//	otelenergy-agent doctor               # check this node first
//	otelenergy-agent                      # NVML, OTLP to localhost:4318
//	OTEL_METRICS_EXPORTER=prometheus otelenergy-agent -simulate
//
// The flags, with their OTELENERGY_* variables, are package flags'; the
// services and their order are package app's.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"go.opentelemetry.io/otel"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/flags"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/app"
	"github.com/otelenergy/otelenergy/internal/cli"
	"github.com/otelenergy/otelenergy/internal/doctor"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, app.Deps{}))
}

// run is the agent's life: it returns the exit status.
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer, deps app.Deps) int {
	if len(args) > 0 && args[0] == flags.DoctorCommand {
		return doctor.Main(ctx, args[1:], stdout, stderr, lookupEnv)
	}
	cfg, err := flags.Parse(args, lookupEnv, stderr)
	if errors.Is(err, flags.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "otelenergy-agent:", err)
		return 2
	}
	build := cli.ReadBuild()
	if cfg.Version {
		fmt.Fprintln(stdout, build)
		return 0
	}
	log := cli.Logging{Level: cfg.LogLevel, Format: cfg.LogFormat}.NewLogger(stderr)
	log.Info("otelenergy-agent starting", slog.Any("build", build))
	// Background errors (an export that fails at every interval, a
	// counter read) repeat at their cadence: each is logged once, then
	// counted, as the proxy does.
	errLog := cli.NewOnceLog(log, "background error")
	defer errLog.Close()
	otel.SetErrorHandler(errLog)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	if deps.LookupEnv == nil {
		deps.LookupEnv = lookupEnv
	}
	if err := app.Run(ctx, cfg, log, deps); err != nil {
		log.Error("agent failed", "err", err)
		return 1
	}
	return 0
}
