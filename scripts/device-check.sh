#!/usr/bin/env bash
# The NVML hardware checks, for a machine with an NVIDIA GPU and driver: one
# short run that lists the GPUs, runs otelenergy-agent doctor (NVML, each
# counter's update period measured with a tight polling loop, counter power
# against GetPowerUsage, limits, MIG, process listing, the PID namespace),
# then the hardware tests, which check that the Monitor's step estimator
# learns the same period. It prints everything it measured; with $OUT set,
# it also writes it to $OUT/device-check.log. doctor's exporter check is
# left out (OTEL_METRICS_EXPORTER=none) unless the caller sets an exporter:
# the device machine has no Collector.
set -euo pipefail
cd "$(dirname "$0")/.."
log="${OUT:-/tmp}/device-check.log"
: > "$log"
nvidia-smi -L 2>/dev/null | tee -a "$log" || echo "nvidia-smi not found" | tee -a "$log"
echo "== otelenergy-agent doctor" | tee -a "$log"
# Built, then run: go run reports any failing program as exit status 1,
# which would hide doctor's 2 (a bad argument) behind 1 (a failed check).
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
  go build -o "$bin/otelenergy-agent" ./cmd/otelenergy-agent
doctor=0
OTEL_METRICS_EXPORTER="${OTEL_METRICS_EXPORTER:-none}" \
  "$bin/otelenergy-agent" doctor -window 3s 2>&1 | tee -a "$log" || doctor=$?
echo "== doctor exit status $doctor" | tee -a "$log"
echo "== hardware tests" | tee -a "$log"
CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
  go test -count=1 -v -run 'TestHardware' ./internal/nvmlsource/ 2>&1 | tee -a "$log"
exit "$doctor"
