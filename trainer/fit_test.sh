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

# Precisions the cpu accelerator declares: each trains, says so, and --summary_json records it. A short run (3
# epochs) is far above chance (0.25) in every one of them.
summary=${TEST_TMPDIR:-/tmp}/fit_summary.$$.json
run_precision() {  # run_precision <flag value> <precision used> <stderr fragment or ''>
  local flag=$1 used=$2 fragment=$3 out err acc
  out=$($fit --precision="$flag" --max_epochs=3 --enable_progress_bar=false --enable_checkpointing=false \
    --summary_json="$summary" 2>/tmp/fit_err.$$)
  local code=$?
  err=$(cat /tmp/fit_err.$$)
  if [[ $code -ne 0 ]]; then fail "--precision=$flag exited $code: $err"; return; fi
  grep -qF "Trained on cpu (single_device, $used) for 3 epochs" <<<"$out" || fail "--precision=$flag: no '$used' in: $out"
  grep -qF "\"precision\": \"$used\", \"resumed_from\"" "$summary" || fail "--precision=$flag: summary: $(cat "$summary")"
  acc=$(awk '$1 == "val_acc" {print $2}' <<<"$out")
  awk -v a="${acc:-0}" 'BEGIN {exit !(a > 0.75)}' || fail "--precision=$flag: val_acc '${acc}' is not above 0.75"
  if [[ -n $fragment ]]; then
    grep -qF -- "$fragment" <<<"$err" || fail "--precision=$flag: '$fragment' not on stderr: $err"
  else
    grep -q "historical reasons\|not supported on CPU" <<<"$err" && fail "--precision=$flag: unexpected warning: $err"
  fi
  rm -f "$summary"
}
run_precision 32-true 32-true ""
run_precision 64-true 64-true ""
run_precision 64 64-true ""  # Lightning maps "64" silently.
run_precision bf16-mixed bf16-mixed "Using bfloat16 Automatic Mixed Precision (AMP)"
run_precision bf16-true bf16-true ""
# Lightning's substitution on CPU, with its warning.
run_precision 16-mixed bf16-mixed "You passed \`Trainer(accelerator='cpu', precision='16-mixed')\` but AMP with fp16 is not supported on CPU. Using \`precision='bf16-mixed'\` instead."
run_precision bf16 bf16-mixed "'bf16' is supported for historical reasons but its usage is discouraged. Please set your precision to 'bf16-mixed' instead!"

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
expect_usage_error "precision '16-true' is not supported by the cpu accelerator; it supports 32-true, 64-true, bf16-mixed, bf16-true" --precision=16-true
expect_usage_error "unexpected argument 'extra'" extra

rm -f /tmp/fit_err.$$
if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "fit checks passed"
