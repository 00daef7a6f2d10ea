#!/usr/bin/env bash
# Instructions per training step of the tiny MLP, Kiln against the hand-written LibTorch loops (torch::optim's, and
# the fused one that calls LibTorch's fused kernel itself: the fastest the step can be), counted by callgrind
# (repeatable to 0.3%, unlike timings on a shared machine). Each side runs twice, with 200 and 400 steps; the
# difference divided by 200 is the cost of one step, with start-up cancelled out. Then the cost of logging: Kiln with
# a CSV logger and no metric logged per step against the same with 50, named three ways (metrics_50_*_over_0); of a
# checkpoint every 10 steps against none (checkpoint_10_over_0: every thread's instructions, then the training
# thread's alone, since the checkpoint writer's thread pickles and writes off the step); and Kiln's own optimizers
# (kiln::FusedSGD, FusedAdam: LibTorch's fused kernels under 2.x) against both hand-written loops, on the tiny MLP and
# on the medium and many-layer classifiers (10 and 20 steps: a medium step is ~100 times a tiny one).
#
#   bazel build -c opt //tests/bench:step_instructions && tools/bench_instructions.sh [overhead|optimizers]
#
# "overhead" runs the tiny model's figures only (raw, kiln, metrics, checkpoint), "optimizers" the optimizer ones
# only; both by default. "profiler" compares Kiln's step with no profiler set against the same step built before the
# profilers (KILN_STEP_INSTRUCTIONS_BASELINE: a step_instructions built -c opt at a commit without them, such as
# d4a1f65), twice each: what the loops' dispatch through LoopContext costs when off (docs/performance.md).
set -euo pipefail
part=${1:-all}
case "$part" in
  all | overhead | optimizers | profiler) ;;
  *)
    echo "tools/bench_instructions.sh: unknown part '$part'; accepted: overhead, optimizers, profiler (default: the" \
      "first two)" >&2
    exit 2
    ;;
esac
cd "$(dirname "$0")/.."
binary=${KILN_STEP_INSTRUCTIONS:-bazel-out/k8-opt/bin/tests/bench/step_instructions}  # -c opt's; or a copy built elsewhere.
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 1; }
[[ -x $binary ]] || { echo "build it first: bazel build -c opt //tests/bench:step_instructions" >&2; exit 1; }
# count <mode> <steps> [metrics|every]: instructions of the whole run, every thread's; with THREAD=1, the first
# (training) thread's alone: the checkpoint writer's thread serialises and writes files off the step.
count() {
  local out
  out=$(mktemp -d)
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/cg" "$binary" "$@" >/dev/null 2>&1
  if [[ ${THREAD:-all} == 1 ]]; then
    sed -n 's/^summary: //p' "$out/cg-01"
  else
    cat "$out"/cg-* | sed -n 's/^summary: //p' | awk '{total += $1} END {printf "%.0f\n", total}'
  fi
  rm -rf "$out"
}
# per_step <mode> <short> <long> [arguments]: instructions of one step, from a run of <short> steps and one of <long>;
# the arguments (one word, or several separated by spaces) follow the step count.
per_step() {
  local short long
  # shellcheck disable=SC2086  # Split on purpose: "50 built" is two arguments.
  short=$(count "$1" "$2" ${4:+$4})
  # shellcheck disable=SC2086
  long=$(count "$1" "$3" ${4:+$4})
  echo $(( (long - short) / ($3 - $2) ))
}
# ratio <name> <numerator> <denominator>
ratio() { awk -v a="$2" -v b="$3" -v n="$1" 'BEGIN {printf "%s %.4f\n", n, a / b}'; }
if [[ $part == profiler ]]; then
  baseline=${KILN_STEP_INSTRUCTIONS_BASELINE:-}
  [[ -x $baseline ]] || {
    echo "set KILN_STEP_INSTRUCTIONS_BASELINE to a step_instructions built -c opt before the profilers (d4a1f65)" >&2
    exit 1
  }
  for round in 1 2; do
    off=$(per_step kiln 200 400)
    before=$(binary=$baseline per_step kiln 200 400)
    echo "kiln_profiler_off round $round instructions_per_step $off"
    echo "kiln_before_profilers round $round instructions_per_step $before"
    ratio "profiler_off_over_before_profilers_round_${round}_instructions" "$off" "$before"
  done
  exit 0
fi
raw_per_step=$(per_step raw 200 400)
echo "raw instructions_per_step $raw_per_step"
fused_raw_per_step=$(per_step fused_raw 200 400)
echo "fused_raw instructions_per_step $fused_raw_per_step"
if [[ $part != optimizers ]]; then
  kiln_per_step=$(per_step kiln 200 400)
  echo "kiln instructions_per_step $kiln_per_step"
  ratio kiln_over_raw_instructions "$kiln_per_step" "$raw_per_step"
  metrics_0=$(per_step kiln_metrics 200 400 0)
  echo "kiln_metrics_0 instructions_per_step $metrics_0"
  # 50 metrics named as a program names them: made once, passed as literals are (a const char*), or built in each
  # call (as the README's example builds stage + "_loss").
  for naming in made literal built; do
    metrics_50=$(per_step kiln_metrics 200 400 "50 $naming")
    echo "kiln_metrics_50_$naming instructions_per_step $metrics_50"
    ratio "metrics_50_${naming}_over_0_instructions" "$metrics_50" "$metrics_0"
  done
  # The same names built in each call and not logged: what the program pays for building them, so that Kiln's part
  # of the "built" row is its ratio over this one.
  built_unlogged=$(per_step kiln_metrics 200 400 "50 built_unlogged")
  echo "kiln_metrics_50_built_unlogged instructions_per_step $built_unlogged"
  ratio metrics_50_built_over_built_unlogged_instructions "$metrics_50" "$built_unlogged"
  # 200 and 1000 steps: the two threads' interleaving moves a run's count by up to 0.2 M instructions, which 200
  # steps' difference turned into 0.3% either way; 800 make it under 0.1%.
  checkpoint_0=$(per_step kiln_checkpoint 200 1000 0)
  checkpoint_10=$(per_step kiln_checkpoint 200 1000 10)
  echo "kiln_checkpoint_0 instructions_per_step $checkpoint_0"
  echo "kiln_checkpoint_10 instructions_per_step $checkpoint_10"
  ratio checkpoint_10_over_0_instructions "$checkpoint_10" "$checkpoint_0"
  checkpoint_0=$(THREAD=1 per_step kiln_checkpoint 200 1000 0)
  checkpoint_10=$(THREAD=1 per_step kiln_checkpoint 200 1000 10)
  echo "kiln_checkpoint_0 training_thread_instructions_per_step $checkpoint_0"
  echo "kiln_checkpoint_10 training_thread_instructions_per_step $checkpoint_10"
  ratio checkpoint_10_over_0_training_thread_instructions "$checkpoint_10" "$checkpoint_0"
fi
[[ $part == overhead ]] && exit 0
fused_per_step=$(per_step kiln_fused 200 400)
echo "kiln_fused instructions_per_step $fused_per_step"
ratio kiln_fused_over_raw_instructions "$fused_per_step" "$raw_per_step"
ratio kiln_fused_over_fused_raw_instructions "$fused_per_step" "$fused_raw_per_step"
for model in medium many; do
  raw=$(per_step raw_$model 10 20)
  fused_raw=$(per_step fused_raw_$model 10 20)
  kiln=$(per_step kiln_$model 10 20)
  echo "raw_$model instructions_per_step $raw"
  echo "fused_raw_$model instructions_per_step $fused_raw"
  echo "kiln_$model instructions_per_step $kiln"
  ratio "kiln_${model}_over_raw_instructions" "$kiln" "$raw"
  ratio "kiln_${model}_over_fused_raw_instructions" "$kiln" "$fused_raw"
done
