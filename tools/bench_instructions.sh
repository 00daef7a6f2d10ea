#!/usr/bin/env bash
# Instructions per training step of the tiny MLP, Kiln against the hand-written LibTorch loop, counted by callgrind
# (repeatable to the instruction, unlike timings on a shared machine). Each side runs twice, with 200 and 400
# steps; the difference divided by 200 is the cost of one step, with start-up cancelled out. Then the cost of logging:
# Kiln with a CSV logger and no metric logged per step against the same with 50 (metrics_50_over_0); of a checkpoint
# every 10 steps against none (checkpoint_10_over_0); and Kiln's own optimizers (kiln::FusedSGD, FusedAdam: LibTorch's
# fused kernels under 2.x) against the hand-written torch::optim loop, on the tiny MLP and on the medium and
# many-layer classifiers (10 and 20 steps: a medium step is ~100 times a tiny one).
#
#   bazel build -c opt //tests/bench:step_instructions && tools/bench_instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
binary=bazel-bin/tests/bench/step_instructions
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 1; }
[[ -x $binary ]] || { echo "build it first: bazel build -c opt //tests/bench:step_instructions" >&2; exit 1; }
count() {  # count <mode> <steps> [metrics|every]
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
for every in 0 10; do
  short=$(count kiln_checkpoint 200 $every)
  long=$(count kiln_checkpoint 400 $every)
  per_step=$(( (long - short) / 200 ))
  echo "kiln_checkpoint_$every instructions_per_step $per_step"
  eval "checkpoint_${every}_per_step=$per_step"
done
awk -v a="$checkpoint_0_per_step" -v b="$checkpoint_10_per_step" \
  'BEGIN {printf "checkpoint_10_over_0_instructions %.4f\n", b / a}'
# per_step <mode> <short> <long>: instructions of one step, from two runs.
per_step() {
  local short long
  short=$(count "$1" "$2")
  long=$(count "$1" "$3")
  echo $(( (long - short) / ($3 - $2) ))
}
fused_per_step=$(per_step kiln_fused 200 400)
echo "kiln_fused instructions_per_step $fused_per_step"
awk -v r="$raw_per_step" -v k="$fused_per_step" 'BEGIN {printf "kiln_fused_over_raw_instructions %.4f\n", k / r}'
for model in medium many; do
  raw=$(per_step raw_$model 10 20)
  kiln=$(per_step kiln_$model 10 20)
  echo "raw_$model instructions_per_step $raw"
  echo "kiln_$model instructions_per_step $kiln"
  awk -v r="$raw" -v k="$kiln" -v m="$model" 'BEGIN {printf "kiln_%s_over_raw_instructions %.4f\n", m, k / r}'
done
