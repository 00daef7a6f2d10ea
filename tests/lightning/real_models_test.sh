#!/usr/bin/env bash
# Real models, Kiln beside the real Lightning 2.x (PyPI; tools/setup.sh), each from the same TorchScript weights on
# the same batches in the same order (examples/real_models): the per-step training losses must agree to 1e-4
# relative over at least 200 steps.
#   two_inputs  a two-tower classifier on dictionary batches, validated on two sets (val_*/dataloader_idx_0 and _1)
#   gan         a GAN on sklearn's digits with manual optimization (two toggled optimizers; g_loss and d_loss)
#   char_gpt    a byte-level GPT on a Debian text file, streamed, bf16-mixed, clipped, cosine schedule with warm-up
# Without Lightning it says so and does not run (common.sh).
set -uo pipefail
examples=$PWD/examples/real_models
twin=$examples/lightning_twin.py
compare=$examples/compare_losses.py
source "$PWD/tests/lightning/common.sh"

run() {
  local example=$1 columns=$2
  lightning "$twin" make "$example" "$example" || { fail "$example: making the model and data failed"; return; }
  lightning "$twin" train "$example" "$example" || { fail "$example: Lightning's training failed"; return; }
  "$examples/$example" "$example" >"$example.out" 2>"$example.err" ||
    { grep -v "^[IW][0-9]" "$example.err" | tail -5; fail "$example: Kiln's training failed"; return; }
  echo "== $example"
  python3 "$compare" "$example/kiln/version_0/metrics.csv" "$example/lightning/version_0/metrics.csv" "$columns" 200 ||
    fail "$example: Kiln's losses are not Lightning's"
}

run two_inputs train_loss_step
# Both validation sets are named as Lightning names them, in Kiln's log as in Lightning's.
for column in "val_loss/dataloader_idx_0" "val_loss/dataloader_idx_1"; do
  head -1 two_inputs/kiln/version_0/metrics.csv | tr ',' '\n' | grep -qx "$column" || fail "Kiln logged no $column"
done
run gan g_loss,d_loss
run char_gpt train_loss
finish "three real models train in Kiln as in Lightning, step for step"
