#!/usr/bin/env bash
# Runs the commands of README.md and docs/*.md as a reader would, through
# the docrun markers beside each block (e2e/docparse_test.go says how):
# TestDocsMarked checks that every shell block is marked and every command
# in the text is run or declared not run with its reason, and TestDocs runs
# them, in a network namespace of its own where unshare can make one, so
# that the documents' fixed ports are free. scripts/test.sh runs them with
# the rest of the e2e module. --no-backends leaves out the blocks that need
# Jaeger or Prometheus 3 (which the e2e module builds, 15 to 40 minutes
# cold); the other arguments go to go test: -run 'TestDocs/docs/agent.md'
# runs one document.
set -euo pipefail
cd "$(dirname "$0")/../e2e"
run='^TestDocs(Marked)?$|^TestDocParse$'
args=()
for a in "$@"; do
	case "$a" in
	--no-backends) export OTELENERGY_DOCS_NO_BACKENDS=1 ;;
	*) args+=("$a") ;;
	esac
done
GOWORK=off go test -count=1 -v -timeout 40m -run "$run" "${args[@]}" .
