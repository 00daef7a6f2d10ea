#!/usr/bin/env bash
# Real models, Kiln beside the real Lightning 2.x (PyPI; tools/setup.sh), each from the same TorchScript weights on
# the same batches in the same order (examples/real_models): the per-step training losses must agree to 1e-4
# relative over at least 200 steps.
#   two_inputs  a two-tower classifier on dictionary batches, validated on two sets (val_*/dataloader_idx_0 and _1)
#   gan         a GAN on sklearn's digits with manual optimization (two toggled optimizers; g_loss and d_loss)
#   char_gpt    a byte-level GPT on a Debian text file, streamed, bf16-mixed, clipped, cosine schedule with warm-up
# and the GAN again on 2 CPU processes under DDP (ddp_find_unused_parameters_true: each toggled step leaves the other
# network out, a set of unused parameters that changes between backward passes), against Lightning's DDP run (every
# step's losses of rank 0); with plain ddp the same program stops with an error that names the fix as a library
# program sets it, and does not crash.
# Without Lightning it says so and does not run (common.sh).
set -uo pipefail
examples=$PWD/examples/real_models
twin=$examples/lightning_twin.py
compare=$examples/compare_losses.py
source "$PWD/tests/lightning/common.sh"

# run EXAMPLE COLUMNS [DEVICES MIN_STEPS]: both sides train EXAMPLE (in a folder of that name, or EXAMPLE_ddp on
# DEVICES processes) and their losses must agree at every step, at least MIN_STEPS of them (200).
run() {
  local example=$1 columns=$2 steps=${4:-200} dir=$1 devices=()
  if [[ -n ${3:-} ]]; then
    dir=${example}_ddp
    devices=("$3")
  fi
  lightning "$twin" make "$example" "$dir" || { fail "$dir: making the model and data failed"; return; }
  lightning "$twin" train "$example" "$dir" "${devices[@]}" || { fail "$dir: Lightning's training failed"; return; }
  "$examples/$example" "$dir" "${devices[@]}" >"$dir.out" 2>"$dir.err" ||
    { grep -v "^[IW][0-9]" "$dir.err" | tail -5; fail "$dir: Kiln's training failed"; return; }
  echo "== $dir"
  python3 "$compare" "$dir/kiln/version_0/metrics.csv" "$dir/lightning/version_0/metrics.csv" "$columns" "$steps" ||
    fail "$dir: Kiln's losses are not Lightning's"
}

run two_inputs train_loss_step
# Both validation sets are named as Lightning names them, in Kiln's log as in Lightning's.
for column in "val_loss/dataloader_idx_0" "val_loss/dataloader_idx_1"; do
  head -1 two_inputs/kiln/version_0/metrics.csv | tr ',' '\n' | grep -qx "$column" || fail "Kiln logged no $column"
done
run gan g_loss,d_loss
run char_gpt train_loss
# 1,797 digits on 2 processes in batches of 32: 29 steps an epoch, 4 epochs.
run gan g_loss,d_loss 2 100
"$examples/gan" gan_ddp 2 ddp >gan_plain_ddp.out 2>gan_plain_ddp.err
code=$?
echo "== gan under plain ddp: exit $code"
[[ $code -eq 1 ]] || fail "the GAN under plain ddp exited $code, not 1 (a crash is a signal: 128 + its number)"
grep -qF 'TrainerOptions: .strategy = "ddp_find_unused_parameters_true"' gan_plain_ddp.err ||
  fail "plain ddp's error does not name the library's fix: $(grep -v '^[IW][0-9]' gan_plain_ddp.err | tail -2)"
grep -q -- '--strategy=' gan_plain_ddp.err && fail "plain ddp's error names fit's flag to a library program"
finish "three real models train in Kiln as in Lightning, step for step, and the GAN under DDP too"
