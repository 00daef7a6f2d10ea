#!/usr/bin/env bash
# StochasticWeightAveraging and EMAWeightAveraging from a user's program on 2 real processes (DDP over Gloo,
# tests/ddp/weight_averaging.cc): both ranks end with the same averaged parameters, bit for bit, and the same number
# of updates. BatchNorm's running statistics are each rank's own (each rank normalises its own shard, and SWA's pass
# runs on it), as under Lightning's DDP without SyncBatchNorm, so they are left out of the comparison.
set -uo pipefail
program=$PWD/tests/ddp/weight_averaging
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
for mode in swa ema; do
  timeout 300 "$program" "$mode" "$mode.txt" devices=2 2>"$mode.err" || { tail -5 "$mode.err"; fail "$mode run failed"; continue; }
  [[ -s $mode.txt && -s $mode.txt.rank1 ]] || { fail "$mode: a rank wrote no result"; continue; }
  params() { grep -v '^norm.running\|^norm.num_batches' "$1"; }
  cmp -s <(params "$mode.txt") <(params "$mode.txt.rank1") || fail "$mode: the ranks' averaged parameters differ"
  # On 2 processes each epoch has half the steps: SWA still averages 4 epochs, EMA every one of 12 steps.
  expected=$([[ $mode == swa ]] && echo 4 || echo 12)
  grep -qx "n_averaged $expected" "$mode.txt" || fail "$mode averaged $(grep n_averaged "$mode.txt"), not $expected"
done
if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: SWA's and EMA's averaged weights are the same on both of 2 DDP processes"
