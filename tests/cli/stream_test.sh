#!/usr/bin/env bash
# fit --streaming through the real //trainer:fit binary (issue #35, item 3): a CSV file read as a stream of batches
#   1. trains, taking ceil(rows / batch_size) steps an epoch, and validates on --val_data;
#   2. --mode=validate from its checkpoint restores --streaming and --val_data and gives the val_loss it logged;
#   3. resumed from a checkpoint taken inside an epoch (every_n_train_steps), ends bit for bit where the straight run
#      ends (the stream's position is in the checkpoint);
#   4. with 2 DDP processes whose shares differ by one batch, every rank stops when the shorter share ends;
#   5. refuses a gzip file and --val_data without --streaming, saying what to do.
set -uo pipefail
fit=$PWD/trainer/cli/fit
compare=$PWD/tests/ddp/compare_checkpoints
python=/usr/bin/python3
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
field() { sed -n -E "s/.*\"$2\": \"?([^\",}]*)\"?.*/\1/p" "$1"; }

# 3001 rows of three classes, and 300 validation rows.
$python - <<'PY' || exit 1
import random
random.seed(1)
for name, rows in (("train.csv", 3001), ("val.csv", 300)):
    with open(name, "w") as f:
        f.write("a,b,c,label\n")
        for _ in range(rows):
            k = random.randrange(3)
            f.write(f"{random.gauss(k, 0.5):.4f},{random.gauss(-k, 0.5):.4f},{random.gauss(0, 1):.4f},c{k}\n")
PY
common=(--data=train.csv --streaming --val_data=val.csv --enable_progress_bar=false --num_workers=0 --seed=3)

# 1. 3001 rows in batches of 64: 47 steps an epoch.
"$fit" "${common[@]}" --max_epochs=2 --default_root_dir=straight --summary_json=straight.json >straight.log 2>&1 ||
  { tail -5 straight.log; fail "a streaming run failed"; }
steps=$(field straight.json global_step)
[[ $steps == 94 ]] || fail "the streaming run took $steps steps, not 94"
grep -q "3001 training rows read as a stream, 300 validation rows from" straight.log ||
  fail "the run does not say it streams its rows"
val_loss=$(field straight.json val_loss)
awk -v v="${val_loss:-9}" 'BEGIN {exit !(v < 0.6)}' || fail "val_loss $val_loss: the stream did not train"

# 2. Validation from the checkpoint needs no flag but the checkpoint.
"$fit" --mode=validate --ckpt_path=last --default_root_dir=straight --enable_progress_bar=false \
  --summary_json=validate.json >validate.log 2>&1 || { tail -5 validate.log; fail "--mode=validate failed"; }
[[ $(field validate.json val_loss) == "$val_loss" ]] ||
  fail "--mode=validate gave val_loss $(field validate.json val_loss), the run logged $val_loss"

# 3. A checkpoint at step 30 (inside epoch 0), resumed to the end.
"$fit" "${common[@]}" --max_steps=30 --every_n_train_steps=10 --default_root_dir=resumed >first.log 2>&1 ||
  { tail -5 first.log; fail "the run to step 30 failed"; }
"$fit" "${common[@]}" --max_epochs=2 --ckpt_path=last --default_root_dir=resumed >second.log 2>&1 ||
  { tail -5 second.log; fail "resuming the stream failed"; }
grep -q "batch 30, global step 30" second.log || fail "the resumed run did not start at batch 30 of epoch 0"
"$compare" straight/lightning_logs/version_0/checkpoints/last.ckpt \
  "$(ls -t $(find resumed -name last.ckpt) | head -1)" 0 >compare.log 2>&1 ||
  { cat compare.log; fail "the resumed stream ended elsewhere than the straight run"; }

# 4. Batches of 50: rank 0's share is 1501 rows (31 batches), rank 1's 1500 (30): 30 steps an epoch, no hang.
timeout 300 "$fit" "${common[@]}" --max_epochs=2 --batch_size=50 --devices=2 --strategy=ddp --accelerator=cpu \
  --default_root_dir=ddp --summary_json=ddp.json >ddp.log 2>&1 || { tail -5 ddp.log; fail "the DDP stream failed"; }
[[ $(field ddp.json global_step) == 60 ]] || fail "the DDP stream took $(field ddp.json global_step) steps, not 60"

# 5. What cannot work says so.
gzip -k train.csv
"$fit" --data=train.csv.gz --streaming --max_epochs=1 >gzip.log 2>&1 && fail "a gzip stream was accepted"
grep -q "is gzip-compressed; a stream reads plain text" gzip.log || { cat gzip.log; fail "no fix for a gzip stream"; }
"$fit" --data=train.csv --val_data=val.csv --max_epochs=1 >val.log 2>&1 && fail "--val_data without --streaming"
grep -q "it is read with --streaming only" val.log || { cat val.log; fail "no fix for --val_data alone"; }

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: fit --streaming trains, validates from its checkpoint, resumes mid-epoch exactly, and runs DDP on" \
  "uneven shares"
