#!/usr/bin/env bash
# Drives the real //trainer:fit binary: a short default run, and bad flags that must exit 2 with a clear error.
set -uo pipefail
fit=trainer/fit
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

out=$($fit --max_epochs=5 --enable_progress_bar=false 2>/tmp/fit_err.$$)
status=$?
echo "$out"
[[ $status -eq 0 ]] || fail "default run exited $status: $(cat /tmp/fit_err.$$)"
grep -q "Trained on cpu (single_device, 32-true) for 5 epochs" <<<"$out" || fail "no training summary line"
# Four classes: chance accuracy is 0.25. A trained MLP must be far above it.
val_acc=$(awk '$1 == "val_acc" {print $2}' <<<"$out")
awk -v a="${val_acc:-0}" 'BEGIN {exit !(a > 0.75)}' || fail "val_acc '${val_acc}' is not above 0.75"

expect_usage_error() {  # expect_usage_error <stderr fragment> <flags>...
  local fragment=$1
  shift
  local err
  err=$($fit "$@" 2>&1 >/dev/null)
  local code=$?
  if [[ $code -ne 2 ]]; then fail "fit $* exited $code, wanted 2"; return; fi
  grep -q "^error: " <<<"$err" || fail "fit $*: no 'error: ' line in: $err"
  grep -qF -- "$fragment" <<<"$err" || fail "fit $*: '$fragment' not in: $err"
}
expect_usage_error "unknown accelerator 'tpu'; registered: cpu" --accelerator=tpu
expect_usage_error "invalid devices value 'x'" --devices=x
expect_usage_error "--limit_train_batches='lots' is not valid" --limit_train_batches=lots
expect_usage_error "--hidden_sizes='64,-1' is not valid" --hidden_sizes=64,-1
expect_usage_error "--batch_size=0 is not valid" --batch_size=0
expect_usage_error "precision 'fp8' is not supported" --precision=fp8
expect_usage_error "unexpected argument 'extra'" extra

rm -f /tmp/fit_err.$$
if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "fit checks passed"
