#!/usr/bin/env bash
# Runs every test of otelenergy: vet, the unit tests under the race detector,
# a build without cgo, a smoke run of every benchmark, the real-client
# integration tests (their own module), the strict decoding of the
# deployment manifests (their own module), and the end-to-end tests against
# real Jaeger v2, Prometheus 2 and Prometheus 3 (the e2e module provisions
# all three; cold, building Jaeger and Prometheus 3 takes 15 to 40 minutes
# on two cores, depending on what else runs).
#
# The library, the examples and the two binaries (cmd/otelenergy-proxy,
# cmd/otelenergy-agent) are modules of one workspace (go.work), so that the
# examples' and binaries' exporters never enter the library's go.mod; pkgs
# names them all. The integration, deploy and e2e modules stay out of the workspace
# (their dependencies must not change the library's build), so they run
# with GOWORK=off.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }
pkgs=(./... ./example/... ./cmd/otelenergy-proxy/... ./cmd/otelenergy-agent/...)

step "go vet"
go vet "${pkgs[@]}"

step "exported names (otelenergy at most 50; README's figure)"
./scripts/exported-names.sh

step "unit tests (-race)"
# The default 10-minute limit per package is a wall-clock deadline a
# loaded machine misses: otelenergy's tests under -race take about 18
# minutes a run at a load average of 20 on two cores.
go test -race -count=1 -timeout 45m "${pkgs[@]}"

step "build without cgo (NVML stub)"
CGO_ENABLED=0 go build "${pkgs[@]}"
CGO_ENABLED=0 go vet "${pkgs[@]}"

step "benchmark smoke run (-benchtime=1x)"
benchlog=$(mktemp)
if ! go test -run '^$' -bench . -benchtime 1x "${pkgs[@]}" >"$benchlog" 2>&1; then
	grep -v '^\(Benchmark\|goos\|goarch\|pkg\|cpu\)' "$benchlog" | tail -60
	rm -f "$benchlog"
	exit 1
fi
rm -f "$benchlog"

if [ -d integration ] && [ -f integration/go.mod ]; then
	step "integration: the official openai-go client through the gateway to the demo app"
	(cd integration && GOWORK=off go vet ./... && GOWORK=off go test -race -count=1 -timeout 10m ./...)
fi

if [ -d deploy ] && [ -f deploy/go.mod ]; then
	step "deployment manifests: strict decoding with the Kubernetes API types"
	(cd deploy && GOWORK=off go vet ./... && GOWORK=off go test -count=1 ./...)
fi

if [ -d e2e ] && [ -f e2e/e2e_test.go ]; then
	step "end-to-end: app, a fleet of two proxies, and the agent -> OTLP -> Jaeger v2 -> Prometheus 2 (scrape) and Prometheus 3 (OTLP)"
	(cd e2e && GOWORK=off go test -count=1 -v -timeout 60m ./...)
fi
