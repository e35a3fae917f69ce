#!/usr/bin/env bash
# The NVML hardware checks, for a machine with an NVIDIA GPU and driver: one
# short run that lists the GPUs, reads their counters, measures each
# counter's real update period with a tight polling loop, and checks that the
# Monitor's step estimator learns the same period. It prints everything it
# measured; with $OUT set, it also writes it to $OUT/device-check.log.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi -L 2>/dev/null || echo "nvidia-smi not found"
go test -count=1 -v -run 'TestHardware' ./internal/nvmlsource/ 2>&1 | tee "${OUT:-/tmp}/device-check.log"
