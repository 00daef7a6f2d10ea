#!/usr/bin/env bash
# A non-finite loss through the real //trainer:fit binary: a learning rate of 1e20 makes Adam's first step blow the
# MLP's weights up, and the next loss is NaN. fit must stop naming the step (on_nonfinite_loss=stop, the default),
# or skip such batches when asked (skip), never train on NaN silently.
set -uo pipefail
fit=trainer/cli/fit
work=${TEST_TMPDIR:-$(mktemp -d)}
run=(--learning_rate=1e20 --max_epochs=1 --num_train=640 --num_val=128 --enable_progress_bar=false
     --log_every_n_steps=0 --enable_checkpointing=false)
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

$fit "${run[@]}" >"$work/stop.log" 2>&1
code=$?
echo "stop: exit status $code; $(grep -m1 '^error' "$work/stop.log")"
[[ $code -ne 0 ]] || fail "fit exited 0 after a NaN loss"
grep -qE '^error: the training loss is -?nan at epoch 0, batch [0-9]+ \(global step [0-9]+\); training stopped' \
  "$work/stop.log" || fail "no error naming the step: $(tail -2 "$work/stop.log")"
grep -q "^Trained on" "$work/stop.log" && fail "fit reported a finished training"

$fit "${run[@]}" --on_nonfinite_loss=skip --summary_json="$work/skip.json" >"$work/skip.log" 2>&1
code=$?
skipped=$(grep -cE "skipping epoch 0 batch [0-9]+: the training loss is -?nan \(on_nonfinite_loss=\"skip\"\)" "$work/skip.log")
echo "skip: exit status $code; $skipped batches skipped, each with a warning"
[[ $code -eq 0 ]] || fail "on_nonfinite_loss=skip still failed: $(grep -m1 error "$work/skip.log")"
[[ $skipped -ge 1 ]] || fail "no warning for a skipped batch: $(tail -3 "$work/skip.log")"

# The control: the same run with a sane learning rate has no NaN, so the checks above can fail.
$fit "${run[@]/--learning_rate=1e20/--learning_rate=1e-3}" >"$work/sane.log" 2>&1 || fail "the sane run failed"
grep -q "skipping epoch" "$work/sane.log" && fail "the sane run skipped batches"

$fit "${run[@]}" --on_nonfinite_loss=ignore >"$work/bad.log" 2>&1
[[ $? -eq 2 ]] || fail "--on_nonfinite_loss=ignore was accepted"
grep -q "on_nonfinite_loss='ignore' is not valid; pass 'stop' or 'skip'" "$work/bad.log" || fail "unclear flag error"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "a NaN loss stops fit naming the step, or is skipped with a warning when asked"
