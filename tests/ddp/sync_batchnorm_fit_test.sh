#!/usr/bin/env bash
# Trainer(sync_batchnorm=true) from a user's program (tests/ddp/sync_batchnorm_fit.cc), in float64 (64-true):
# - 2 CPU processes (Gloo) with 8 examples of each batch of 16 end with the parameters and running statistics of one
#   process with the whole batches, within the bound the program derives; without sync_batchnorm they do not;
# - the same on 2 virtual NPU devices, over the virtual NPU's own collective backend;
# - a BatchNorm held as a member and called directly stops fit after the first batch, naming the layer and the fix
#   (exit 2), with the BatchNorm put back;
# - one process converts nothing, and says so.
set -uo pipefail
program=$PWD/tests/ddp/sync_batchnorm_fit
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
train() {  # NAME ACCELERATOR DEVICES BATCH SYNC
  mkdir -p "$1"
  timeout 300 "$program" train "$PWD/$1" "$2" "$3" "$4" "$5" >"$1.out" 2>"$1.err" ||
    { grep -v '^frame' "$1.err" | tail -5; fail "$1: the run failed"; }
}
compare() {  # NAME RANK SHOULD_MATCH
  local out
  out=$("$program" compare reference/0.txt "$1/$2.txt" 2>&1)
  local code=$?
  echo "$1 rank $2 against one process: $out"
  if [[ $3 == yes && $code -ne 0 ]]; then fail "$1 rank $2 does not end where one process on the whole batch does"; fi
  if [[ $3 == no && $code -ne 1 ]]; then fail "$1 rank $2 ends where one process does (or compare failed: $code)"; fi
}

train reference cpu 1 16 true
grep -q "sync_batchnorm=True has no effect with one process (strategy 'single_device', 1 process)" reference.err ||
  fail "one process does not say that sync_batchnorm has no effect: $(grep sync_batchnorm reference.err)"
grep -q "BatchNorm layer(s) synchronised" reference.err && fail "one process converted layers"

train sync cpu 2 8 true
grep -q "sync_batchnorm: 1 BatchNorm layer(s) synchronised across 2 processes: body.1" sync.err ||
  fail "no conversion of body.1 in the log: $(grep sync_batchnorm sync.err)"
compare sync 0 yes
compare sync 1 yes
train unsynchronised cpu 2 8 false
compare unsynchronised 0 no

export VIRTUAL_NPU_DEVICES=2
train npu virtual_npu 2 8 true
grep -q "rank 0 trained on virtual_npu:0" npu.out || fail "the virtual NPU run did not train on virtual_npu:0: $(cat npu.out)"
compare npu 0 yes
compare npu 1 yes
unset VIRTUAL_NPU_DEVICES

mkdir -p member
timeout 300 "$program" member "$PWD/member" >member.out 2>member.err
code=$?
[[ $code -eq 2 ]] || fail "a BatchNorm called as a member: exit $code, not 2: $(grep -v '^frame' member.err | tail -3)"
grep -q "sync_batchnorm: the BatchNorm layer 'bn' ran outside the kiln::SyncBatchNorm" member.err ||
  fail "the error does not name the layer 'bn': $(grep -v '^frame' member.err | tail -3)"
grep -q "Declare the layer as kiln::SyncBatchNorm" member.err || fail "the error does not name the fix"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: sync_batchnorm on 2 processes (CPU, virtual NPU) ends where one process on the whole batch does;" \
  "a member BatchNorm is refused; one process converts nothing"
