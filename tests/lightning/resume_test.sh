#!/usr/bin/env bash
# The real Lightning (PyPI, tools/setup.sh) on checkpoints of the real //trainer:fit training a TorchScript model:
#   1. Lightning's Trainer.fit(ckpt_path=) resumes Kiln's end-of-epoch checkpoint at Kiln's epoch and step, with
#      Adam's state at that step, and warns about nothing in it;
#   2. and Kiln's mid-epoch checkpoint at the batch after the one it was written from;
#   3. Lightning's validate, test and predict take Kiln's checkpoint, and validate to the val_loss Kiln logged;
#   4. the round trip Kiln (2 epochs) -> Lightning (epoch 3) -> Kiln (epoch 4) ends where 4 epochs of Kiln end;
#   5. Kiln's built-in MLP, rebuilt in PyTorch from nothing but its run's hparams.yaml and checkpoint, predicts what
#      Kiln predicts.
# Both sides train on the same rows in the same order (lightning_side.py says how).
set -uo pipefail
side=$PWD/tests/lightning/lightning_side.py
compare=$PWD/tests/ddp/compare_checkpoints
lightning_modules="lightning"
source "$PWD/tests/lightning/common.sh"

seed=7
lightning "$side" make . "$seed" || { echo "FAIL: could not make the data and the TorchScript model"; exit 1; }
common=(--data=train.csv --model=net.pt --normalize=false --shuffle=false --val_fraction=0.2 --batch_size=32
  --optimizer=adam --learning_rate=0.01 --seed=$seed --enable_progress_bar=false)
# 128 training rows: 4 batches, 4 steps an epoch. A checkpoint every epoch in one run, every 3 steps in another (step
# 3 is mid-epoch 0): Lightning's ModelCheckpoint does one or the other.
"$fit" "${common[@]}" --max_epochs=2 --default_root_dir=kiln_run >kiln.log 2>&1 ||
  { tail kiln.log; echo "FAIL: Kiln's first fit failed"; exit 1; }
"$fit" "${common[@]}" --max_epochs=1 --every_n_train_steps=3 --every_n_epochs=0 --default_root_dir=kiln_steps \
  >kiln_steps.log 2>&1 || { tail kiln_steps.log; echo "FAIL: Kiln's fit with --every_n_train_steps failed"; exit 1; }
checkpoints=kiln_run/lightning_logs/version_0/checkpoints
ls "$checkpoints" kiln_steps/lightning_logs/version_0/checkpoints

# 1. From the end of epoch 1 (8 steps): Lightning goes on with epoch 2, batch 0, step 8.
lightning "$side" resume . "$checkpoints/last.ckpt" 3 from_lightning.ckpt "$seed" 2 8 0 ||
  fail "Lightning did not resume Kiln's end-of-epoch checkpoint where it stood"

# 2. From step 3, written at the end of batch 2 of epoch 0: Lightning goes on with batch 3, at step 3.
mid=kiln_steps/lightning_logs/version_0/checkpoints/epoch=0-step=3.ckpt
if [[ ! -f "$mid" ]]; then
  fail "Kiln wrote no $mid (--every_n_train_steps=3)"
else
  EVERY_N_TRAIN_STEPS=3 lightning "$side" resume . "$mid" 1 mid_resumed.ckpt "$seed" 0 3 3 ||
    fail "Lightning did not resume Kiln's mid-epoch checkpoint where it stood"
fi

# 3. Lightning's evaluation entry points, against the val_loss Kiln logged at the end of epoch 1.
val_loss=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "val_loss") c = i; next }
  $1 == 1 && $c != "" { v = $c } END { print v }' kiln_run/lightning_logs/version_0/metrics.csv)
[[ -n "$val_loss" ]] || fail "Kiln logged no val_loss for epoch 1"
lightning "$side" evaluate . "$checkpoints/last.ckpt" "$seed" "${val_loss:-nan}" ||
  fail "Lightning's validate, test or predict did not take Kiln's checkpoint as Kiln trained it"

# 4. The round trip, against 4 epochs in Kiln alone.
"$fit" "${common[@]}" --max_epochs=4 --default_root_dir=straight >straight.log 2>&1 ||
  { tail straight.log; fail "Kiln's 4-epoch fit failed"; }
if [[ -f from_lightning.ckpt ]]; then
  "$fit" "${common[@]}" --max_epochs=4 --default_root_dir=round_trip --ckpt_path=from_lightning.ckpt \
    >round_trip.log 2>&1 || { tail round_trip.log; fail "Kiln did not resume Lightning's checkpoint"; }
  grep -q "epoch 3, batch 0, global step 12" round_trip.log ||
    fail "Kiln did not resume Lightning's checkpoint at epoch 3, step 12: $(grep -a Restored round_trip.log)"
  # Float tolerance: the same operations in the same order, on two builds of the same LibTorch release.
  "$compare" straight/lightning_logs/version_0/checkpoints/last.ckpt \
    round_trip/lightning_logs/version_0/checkpoints/last.ckpt 1e-5 ||
    fail "Kiln -> Lightning -> Kiln did not end where 4 epochs of Kiln end"
fi

# 5. The model described by its files.
"$fit" --data=train.csv --normalize=false --hidden_sizes=12,6 --max_epochs=2 --seed=$seed --default_root_dir=mlp_run \
  --enable_progress_bar=false >mlp.log 2>&1 || { tail mlp.log; fail "Kiln's MLP fit failed"; }
head -4 train.csv | cut -d, -f1-8 >rows.csv
"$fit" --data=train.csv --normalize=false --hidden_sizes=12,6 --seed=$seed --default_root_dir=mlp_run --mode=predict \
  --ckpt_path=last --predict_data=rows.csv --predictions=kiln_predictions.csv --enable_progress_bar=false \
  >predict.log 2>&1 || { tail predict.log; fail "Kiln's prediction failed"; }
mlp=mlp_run/lightning_logs/version_0
lightning "$side" rebuild "$mlp" "$mlp/checkpoints/last.ckpt" rows.csv \
  kiln_predictions.csv || fail "the MLP rebuilt from the run's files does not predict what Kiln predicts"

finish "Lightning $("$python" -c 'import lightning; print(lightning.__version__)') resumes, validates, tests and" \
  "predicts from Kiln's checkpoints, the round trip ends where Kiln alone does, and the run's files describe its model"
