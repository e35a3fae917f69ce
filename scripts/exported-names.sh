#!/usr/bin/env bash
# Prints the exported-name count of every importable (non-internal,
# non-main) package of the library module: top-level names, and with the
# exported methods of exported types. Then checks package otelenergy's
# alone: it fails when otelenergy exports more than 50 names, or when
# README.md's figure ("package `otelenergy` exports N names") is not the
# count, so that the README cannot drift.
set -euo pipefail
cd "$(dirname "$0")/.."

limit=50
out=$(go run scripts/exportednames.go .)
echo "$out"
n=$(awk '$1 == "otelenergy" { print $2 }' <<<"$out")
echo "otelenergy exports $n names (limit $limit)"
if [ "$n" -gt "$limit" ]; then
	echo "exported-names: package otelenergy exports $n names, more than $limit" >&2
	exit 1
fi
readme=$(grep -o 'package `otelenergy` exports [0-9]* names' README.md | grep -o '[0-9][0-9]*' || true)
if [ "$readme" != "$n" ]; then
	echo "exported-names: README.md says package otelenergy exports ${readme:-no figure of} names; it exports $n (write \"package \`otelenergy\` exports $n names\")" >&2
	exit 1
fi
