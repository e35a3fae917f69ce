#!/usr/bin/env bash
# Measures B/A ratios of two benchmarks of one package in alternating runs
# of one compiled test binary (A, B, A, B, ...), which cancels most of the
# machine's drift, and prints each pair and the median ratio.
#
#   scripts/benchpair.sh ./ring 'BenchmarkRing/SearchFloor$' 'BenchmarkRing/AtOrBefore$' 10
set -euo pipefail
pkg=$1 a=$2 b=$3 rounds=${4:-10} benchtime=${BENCHTIME:-1s}
bin=$(mktemp -d)/bench.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" "$pkg"
ns() { "$bin" -test.run '^$' -test.bench "$1" -test.benchtime "$benchtime" | awk '/ns\/op/ {print $3; exit}'; }
ratios=()
for i in $(seq "$rounds"); do
	na=$(ns "$a"); nb=$(ns "$b")
	r=$(awk -v x="$na" -v y="$nb" 'BEGIN {printf "%.3f", y/x}')
	ratios+=("$r")
	echo "round $i: A=$na ns/op B=$nb ns/op B/A=$r"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "median B/A over %d rounds: %.3f (min %.3f, max %.3f)\n", NR, m, v[1], v[NR]}'
