#!/usr/bin/env bash
# ModelCheckpoint's save_weights_only with every_n_train_steps, in Kiln (//trainer:fit) and in the real Lightning on
# the same rows and model (lightning_side.py weights_only): the same file names, Lightning's top-level keys in
# Kiln's files (no optimizer, scheduler or callback state), Lightning's validate loads Kiln's files, and Lightning's
# fit refuses to resume from Kiln's as from its own; Kiln's fit refuses too, naming save_weights_only.
set -uo pipefail
side=$PWD/tests/lightning/lightning_side.py
lightning_modules="lightning"
source "$PWD/tests/lightning/common.sh"

seed=7
lightning "$side" make . "$seed" || { echo "FAIL: could not make the data and the TorchScript model"; exit 1; }
common=(--data=train.csv --model=net.pt --normalize=false --shuffle=false --val_fraction=0.2 --batch_size=32
  --optimizer=adam --learning_rate=0.01 --seed=$seed --enable_progress_bar=false)
"$fit" "${common[@]}" --max_epochs=2 --save_weights_only --every_n_train_steps=3 --every_n_epochs=0 --save_top_k=-1 \
  --default_root_dir=kiln_run >kiln.log 2>&1 || { tail kiln.log; echo "FAIL: Kiln's fit failed"; exit 1; }
checkpoints=kiln_run/lightning_logs/version_0/checkpoints
ls "$checkpoints"
lightning "$side" weights_only . "$seed" "$checkpoints" ||
  fail "Lightning's weights-only files and Kiln's differ, or Lightning did not load Kiln's as its own"
"$fit" "${common[@]}" --max_epochs=3 --ckpt_path="$checkpoints/epoch=1-step=6.ckpt" --default_root_dir=resumed \
  >resumed.log 2>&1
rc=$?
[[ $rc != 0 ]] && grep -q "save_weights_only" resumed.log ||
  fail "Kiln's fit did not refuse to resume from a weights-only file (exit $rc): $(grep error resumed.log)"
finish "Kiln's weights-only checkpoints are Lightning's: same names and keys, loaded by Lightning, refused for resume"
