#!/usr/bin/env bash
# Runs the README's library example (library_example.cc, taken from README.md) and checks what it promises: its
# callback's hooks ran (on_train_start, on_train_batch_end's outputs, on_train_end), it learned (3 classes: chance
# is 0.33), and TrainerOptions' defaults did what Lightning's do: CSV logs and checkpoints in lightning_logs/version_0,
# TensorBoard's in version_1 (each logger its own version, as Lightning's loggers have), and the model summary. Then
# the same program on 2 processes (its second argument, devices): both ranks run the callback, fit then test from
# "best" meet both processes, and rank 0 alone prints the result and writes the run.
set -uo pipefail
example=$PWD/tests/readme/library_example
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

out=$("$example" "$work/run" 2>"$work/stderr")
status=$?
echo "$out"
[[ $status -eq 0 ]] || fail "the example exited $status: $(tail -5 "$work/stderr")"
grep -q '^training starts at step 0$' <<<"$out" || fail "on_train_start did not print"
batches=$(sed -n -E 's/^mean training loss over ([0-9]+) batches: ([0-9.]+)$/\1/p' <<<"$out")
mean=$(sed -n -E 's/^mean training loss over ([0-9]+) batches: ([0-9.]+)$/\2/p' <<<"$out")
# 480 examples in batches of 32: 15 per epoch, for 5 epochs unless EarlyStopping stopped it sooner.
[[ -n "$batches" && $((batches % 15)) -eq 0 && $batches -ge 15 && $batches -le 75 ]] ||
  fail "on_train_batch_end ran '$batches' times, not 15 per epoch"
# The mean of the losses must be below the untrained loss, ln 3 = 1.0986.
awk -v m="${mean:-9}" 'BEGIN {exit !(m > 0 && m < 1.0986)}' || fail "mean training loss '$mean' is not below ln 3"
acc=$(sed -n -E 's/^test_acc ([0-9.]+)$/\1/p' <<<"$out")
awk -v a="${acc:-0}" 'BEGIN {exit !(a > 0.8)}' || fail "test_acc '$acc' is not above 0.8"
run=$work/run/lightning_logs/version_0
# Lightning's default ModelCheckpoint keeps the newest epoch's file (no last.ckpt).
ls "$run"/checkpoints/epoch=*-step=*.ckpt >/dev/null 2>&1 || fail "no checkpoint in $run/checkpoints: $(ls -R "$work/run")"
for file in metrics.csv hparams.yaml; do
  [[ -s "$run/$file" ]] || fail "the default loggers and checkpointing did not write $run/$file: $(ls -R "$work/run")"
done
tensorboard=$work/run/lightning_logs/version_1
ls "$tensorboard"/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard event file in $tensorboard"
grep -q '^epoch,' "$run/metrics.csv" || grep -q ',epoch' "$run/metrics.csv" || fail "metrics.csv has no epoch column"
grep -q 'test_acc' "$run/metrics.csv" || fail "trainer.test after fit did not log into the same run: $(head -2 "$run/metrics.csv")"
[[ $(ls "$tensorboard"/events.out.tfevents.* | wc -l) -eq 2 ]] ||
  fail "fit and test should each write an event file in $tensorboard"
grep -q 'val_loss' "$run/metrics.csv" || fail "metrics.csv has no val_loss: $(head -2 "$run/metrics.csv")"
grep -q 'Total params' "$work/stderr" || fail "no model summary on standard error"


two=$(timeout 300 "$example" "$work/two" 2 2>"$work/two.err")
status=$?
echo "== devices=2"
echo "$two"
[[ $status -eq 0 ]] || fail "the example at devices=2 exited $status: $(grep -v '^[IW][0-9]' "$work/two.err" | tail -5)"
[[ $(grep -c '^training starts at step 0$' <<<"$two") -eq 2 ]] || fail "on_train_start did not run on both ranks"
[[ $(grep -c '^test_acc' <<<"$two") -eq 1 ]] || fail "test_acc was not printed once (rank 0 alone prints it)"
acc=$(sed -n -E 's/^test_acc ([0-9.]+)$/\1/p' <<<"$two")
awk -v a="${acc:-0}" 'BEGIN {exit !(a > 0.8)}' || fail "test_acc '$acc' at devices=2 is not above 0.8"
grep -q 'test_acc' "$work/two/lightning_logs/version_0/metrics.csv" ||
  fail "at devices=2, test after fit did not log into the run: $(ls -R "$work/two" | head)"
[[ -d "$work/two/lightning_logs/version_2" ]] && fail "at devices=2 another rank claimed a run folder"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "the README's library example works as it says, on one process and on two"
