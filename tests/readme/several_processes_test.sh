#!/usr/bin/env bash
# Runs docs/library.md's "Several processes" example (several_processes.cc, taken from the page) with ddp and with
# fsdp: two processes fit, then test the best checkpoint together; rank 0 alone prints the result, which must show
# learning (3 classes: chance is 0.33), once; the second process was started by fit and ended with the program; and
# the program initialised glog, so glog's warning about logging before InitGoogleLogging is not printed.
set -uo pipefail
example=$PWD/tests/readme/several_processes
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
for strategy in ddp fsdp; do
  out=$(timeout 300 "$example" "$work/$strategy" "$strategy" 2>"$work/$strategy.err")
  status=$?
  echo "$strategy: $out"
  [[ $status -eq 0 ]] || fail "$strategy: the example exited $status: $(grep -v '^[IW][0-9]' "$work/$strategy.err" | tail -5)"
  [[ $(grep -c '^2 processes: test_acc' <<<"$out") -eq 1 ]] || fail "$strategy: the result was not printed once"
  acc=$(sed -n -E 's/^2 processes: test_acc ([0-9.]+)$/\1/p' <<<"$out")
  awk -v a="${acc:-0}" 'BEGIN {exit !(a > 0.8)}' || fail "$strategy: test_acc '$acc' is not above 0.8"
  grep -q "rank 1 of 2 joined" "$work/$strategy.err" || fail "$strategy: no second process joined"
  ls "$work/$strategy"/lightning_logs/version_0/checkpoints/*.ckpt >/dev/null 2>&1 ||
    fail "$strategy: no checkpoint in $work/$strategy/lightning_logs/version_0/checkpoints"
  grep -q "Logging before InitGoogleLogging" "$work/$strategy.err" && fail "$strategy: glog warned of logging before init"
done
if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "docs/library.md's program on several processes works as the page says, with ddp and fsdp"
