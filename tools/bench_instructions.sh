#!/usr/bin/env bash
# Instructions per training step of the tiny MLP, Kiln against the hand-written LibTorch loop, counted by callgrind
# (repeatable to the instruction, unlike timings on a shared machine). Each side runs twice, with 200 and 400
# steps; the difference divided by 200 is the cost of one step, with start-up cancelled out. Then the cost of logging:
# Kiln with a CSV logger and no metric logged per step against the same with 50 (metrics_50_over_0).
#
#   bazel build -c opt //tests/bench:step_instructions && tools/bench_instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
binary=bazel-bin/tests/bench/step_instructions
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 1; }
[[ -x $binary ]] || { echo "build it first: bazel build -c opt //tests/bench:step_instructions" >&2; exit 1; }
count() {  # count <raw|kiln|kiln_metrics> <steps> [metrics]
  local out
  out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "$binary" "$@" >/dev/null 2>&1
  sed -n 's/^summary: //p' "$out"
  rm -f "$out"
}
for side in raw kiln; do
  short=$(count $side 200)
  long=$(count $side 400)
  per_step=$(( (long - short) / 200 ))
  echo "$side instructions_per_step $per_step"
  eval "${side}_per_step=$per_step"
done
awk -v r="$raw_per_step" -v k="$kiln_per_step" 'BEGIN {printf "kiln_over_raw_instructions %.4f\n", k / r}'
for metrics in 0 50; do
  short=$(count kiln_metrics 200 $metrics)
  long=$(count kiln_metrics 400 $metrics)
  per_step=$(( (long - short) / 200 ))
  echo "kiln_metrics_$metrics instructions_per_step $per_step"
  eval "metrics_${metrics}_per_step=$per_step"
done
awk -v a="$metrics_0_per_step" -v b="$metrics_50_per_step" 'BEGIN {printf "metrics_50_over_0_instructions %.4f\n", b / a}'
