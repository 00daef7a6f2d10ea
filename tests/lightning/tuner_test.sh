#!/usr/bin/env bash
# Kiln's fit --auto_lr_find against the real Lightning's Tuner.lr_find (tuner_side.py): the same TorchScript weights
# (lightning_side.py make), the same rows in the same order, Adam at the same rate; exponential and linear schedules.
# The learning rates must be equal, the smoothed losses within 1e-6 relative, the suggested point the same.
# fit --auto_scale_batch_size (power, binsearch) against Tuner.scale_batch_size on the same 128 training rows on the
# CPU, where nothing runs out of memory: the same batch size found (the search ends at the training set's size).
set -uo pipefail
side=$PWD/tests/lightning/lightning_side.py
tuner=$PWD/tests/lightning/tuner_side.py
lightning_modules="lightning"
source "$PWD/tests/lightning/common.sh"

seed=7
lightning "$side" make . "$seed" || { echo "FAIL: could not make the data and the TorchScript model"; exit 1; }
common=(--data=train.csv --model=net.pt --normalize=false --shuffle=false --val_fraction=0.2 --batch_size=32
  --optimizer=adam --learning_rate=0.01 --seed=$seed --enable_progress_bar=false --max_epochs=20)
for run in "exponential 1e-5 1 60" "linear 1e-4 0.3 40"; do
  read -r mode min_lr max_lr num <<<"$run"
  dir=kiln_$mode
  "$fit" "${common[@]}" --default_root_dir=$dir --auto_lr_find --lr_find_mode=$mode --lr_find_min_lr=$min_lr \
    --lr_find_max_lr=$max_lr --lr_find_num_training=$num >$dir.log 2>&1 ||
    { tail $dir.log; fail "Kiln's fit --auto_lr_find ($mode) failed"; continue; }
  csv=$dir/lightning_logs/version_0/lr_find.csv
  [[ -f $csv ]] || { fail "Kiln wrote no $csv"; continue; }
  index=$(sed -n 's/.*auto_lr_find: learning rate .* (point \([0-9]*\) of.*/\1/p' $dir.log)
  [[ -n $index ]] || index=None
  lightning "$tuner" lr_find . "$seed" "$csv" "$min_lr" "$max_lr" "$num" "$mode" "$index" ||
    fail "Lightning's lr_find ($mode) is not Kiln's"
done
for mode in power binsearch; do
  dir=kiln_scale_$mode
  "$fit" "${common[@]}" --max_epochs=1 --default_root_dir=$dir --auto_scale_batch_size=$mode >$dir.log 2>&1 ||
    { tail $dir.log; fail "Kiln's fit --auto_scale_batch_size=$mode failed"; continue; }
  kiln=$(sed -n "s/^auto_scale_batch_size ($mode): batch size \([0-9]*\) in place of.*/\1/p" $dir.log)
  expected=$(lightning "$tuner" scale_batch_size . "$seed" $mode) ||
    { fail "Lightning's scale_batch_size ($mode) failed"; continue; }
  [[ -n $kiln && $kiln == "$expected" ]] ||
    fail "--auto_scale_batch_size=$mode: Kiln found '$kiln', Lightning $expected: $(grep -i 'batch size' $dir.log | tail -3)"
done
finish "fit --auto_scale_batch_size finds Lightning's batch size;" \
  "fit --auto_lr_find records Lightning's learning rates and losses and suggests its point"
