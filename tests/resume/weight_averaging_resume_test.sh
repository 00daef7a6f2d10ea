#!/usr/bin/env bash
# Exact resume with StochasticWeightAveraging and EMAWeightAveraging (tests/ddp/weight_averaging.cc, a user's
# program): a run that saves a checkpoint every 5 optimizer steps ends as one that saves none, and a run resumed
# from each of those checkpoints (SWA: before it starts, inside its epochs, mid-epoch, at an epoch's last batch) ends bit for bit
# as the uninterrupted run: the same parameters, buffers, n_averaged and global step. Each checkpoint holds the
# callback's state under Lightning's key (torch.load's view is not needed: resuming it is the check).
set -uo pipefail
program=$PWD/tests/ddp/weight_averaging
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
resumed=0
for mode in swa ema; do
  "$program" "$mode" "$mode.plain.txt" 2>"$mode.plain.err" || { tail -5 "$mode.plain.err"; fail "$mode: plain run failed"; continue; }
  "$program" "$mode" "$mode.full.txt" "checkpoints=$PWD/$mode.ckpts" every_n_train_steps=5 2>"$mode.full.err" ||
    { tail -5 "$mode.full.err"; fail "$mode: run with checkpoints failed"; continue; }
  cmp -s "$mode.plain.txt" "$mode.full.txt" || fail "$mode: saving checkpoints changed the run"
  grep -q "$(printf '%s' "$mode" | sed 's/swa/StochasticWeightAveraging/; s/ema/EMAWeightAveraging/')" \
    "$(ls "$mode.ckpts"/*.ckpt | head -1)" || fail "$mode: the checkpoint holds no state under the callback's key"
  count=0
  for ckpt in "$mode.ckpts"/*.ckpt; do
    name=$(basename "$ckpt" .ckpt)
    "$program" "$mode" "$mode.$name.txt" "resume=$ckpt" 2>"$mode.$name.err" ||
      { tail -5 "$mode.$name.err"; fail "$mode: resuming $name failed"; continue; }
    cmp -s "$mode.plain.txt" "$mode.$name.txt" ||
      { diff "$mode.plain.txt" "$mode.$name.txt" | cut -c1-120 | head -6; fail "$mode: resumed from $name, the run ends elsewhere"; }
    count=$((count + 1))
  done
  ((count >= 4)) || fail "$mode: only $count checkpoints to resume from"
  resumed=$((resumed + count))
done
if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: $resumed runs resumed from SWA's and EMA's checkpoints end bit for bit as the uninterrupted ones"
