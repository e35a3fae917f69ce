#!/usr/bin/env bash
# Runs every test of otelenergy: vet, the unit tests under the race detector,
# a build without cgo, a smoke run of every benchmark, the real-client
# integration tests (their own module), the strict decoding of the
# deployment manifests (their own module), and the end-to-end tests against
# real Jaeger v2, Prometheus 2 and Prometheus 3, and a real serving engine,
# Ollama (the e2e module provisions all four; cold, building Jaeger,
# Prometheus 3 and Ollama, in parallel, takes 20 to 45 minutes on two
# cores, depending on what else runs).
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

# The e2e backends (Jaeger, Prometheus 3, Ollama) build in the background
# from here, beside the unit tests, in a session of their own so that an
# early exit stops the whole build by its process group. Cold, they are
# most of CI's time; warm, seconds. The e2e tests' own -timeout then covers
# the tests alone (TestBuildBackends).
prebuild=
if [ -d e2e ] && [ -f e2e/e2e_test.go ]; then
	prelog=$(mktemp)
	setsid bash -c 'cd e2e && exec env GOWORK=off go test -count=1 -v -run "^TestBuildBackends$" -timeout 80m .' >"$prelog" 2>&1 &
	prebuild=$!
	trap 'kill -TERM -- -"$prebuild" 2>/dev/null || true' EXIT
fi

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

if [ -n "$prebuild" ]; then
	step "end-to-end backends: waiting for the background build of Jaeger, Prometheus 3 and Ollama"
	if ! wait "$prebuild"; then
		tail -80 "$prelog"
		exit 1
	fi
	grep -h 'took' "$prelog" || true
	trap - EXIT
fi

if [ -d e2e ] && [ -f e2e/e2e_test.go ]; then
	step "end-to-end: app, a fleet of two proxies, and the agent -> OTLP -> Jaeger v2 -> Prometheus 2 (scrape) and Prometheus 3 (OTLP); the proxy in front of Ollama and wrapping it; the dashboard on each path; every documented command (TestDocs, scripts/docs.sh)"
	# ollamadrive, the openai-go client the Ollama tests run, is a module
	# of its own inside e2e/: go test ./... there does not reach it.
	(cd e2e/ollamadrive && GOWORK=off go vet ./...)
	(cd e2e && GOWORK=off go vet ./... && GOWORK=off go test -count=1 -v -timeout 70m ./...)
fi
