#!/usr/bin/env bash
# StochasticWeightAveraging and EMAWeightAveraging through //trainer:fit (--swa_lrs, --ema_weight_averaging), read
# back with python3-torch:
#   1. each changes the trained weights (against the same run without it);
#   2. its checkpoints hold its state under Lightning's state key in "callbacks", with Lightning's keys: SWA's
#      average after epoch E is the mean of the weights the checkpoints of epochs swa_start-1 .. E-1 hold (SWA folds
#      the weights in at each epoch's start), and EMA has folded in every optimizer step;
#   3. a run resumed from a mid-run checkpoint ends with the uninterrupted run's weights (params_sha256);
#   4. a config file with the callbacks as LightningCLI writes them (trainer.callbacks, class_path and init_args) is
#      the same run as the flags.
# The flags' bad values are trainer/cli/fit_test.sh's; the averaging against Lightning's is
# //tests/lightning:weight_averaging_test's.
set -uo pipefail
source "$PWD/tests/cli/python_torch.sh"
# 4 epochs of 8 steps; every epoch's checkpoint kept.
common=(--max_epochs=4 --num_train=256 --num_val=64 --hidden_sizes=16 --batch_size=32 --optimizer=sgd
  --learning_rate=0.1 --enable_progress_bar=false --report=false --logger=csv --save_top_k=-1 --seed=7)
sha() { sed -n -E 's/.*"params_sha256": "([0-9a-f]+)".*/\1/p' "$1"; }
run() {  # run NAME FLAGS...: fit into NAME/, its summary in NAME.json
  local name=$1
  shift
  "$fit" "${common[@]}" --default_root_dir="$name" --summary_json="$name.json" "$@" >"$name.out" 2>"$name.err" ||
    fail "$name: fit exited $?: $(grep '^error' "$name.err" | tail -1)"
}
ckpt() { find "$1" -name "epoch=$2-*.ckpt" | head -1; }

run plain
run swa --swa_lrs=0.05 --swa_epoch_start=2 --annealing_epochs=1
run ema --ema_weight_averaging --ema_decay=0.9
[[ -n "$(sha plain.json)" ]] || fail "the run without averaging wrote no params_sha256"
for name in swa ema; do
  [[ -n "$(sha $name.json)" && "$(sha $name.json)" != "$(sha plain.json)" ]] ||
    fail "$name: the trained weights are those of the run without it ($(sha $name.json))"
done

# 2. The checkpoints' state.
$python - "$(ckpt swa 0)" "$(ckpt swa 1)" "$(ckpt swa 2)" "$(ckpt ema 2)" <<'PY' || fail "the checkpoints' averaging state"
import sys
import torch

swa0, swa1, swa2, ema2 = (torch.load(p, map_location="cpu") for p in sys.argv[1:])
problems = []
def expect(what, got, want):
    if got != want:
        problems.append(f"{what}: {got!r}, expected {want!r}")

# --swa_epoch_start=2 is the zero-based epoch 1: the weights at the start of epochs 1 and 2 (those the checkpoints of
# epochs 0 and 1 hold) are folded in by the end of epoch 2.
state = swa2["callbacks"].get("StochasticWeightAveraging")
if state is None:
    sys.exit(f"no 'StochasticWeightAveraging' in the checkpoint's callbacks: {sorted(swa2['callbacks'])}")
expect("SWA's keys", sorted(state), ["average_model_state", "latest_update_epoch", "n_averaged", "scheduler_state"])
expect("SWA's n_averaged", int(state["n_averaged"]), 2)
expect("SWA's latest_update_epoch", state["latest_update_epoch"], 2)
expect("SWALR's state's keys", sorted(state["scheduler_state"] or {}), ["_step_count", "last_epoch"])
for name, module_value in swa2["state_dict"].items():
    average = state["average_model_state"].get(name)
    if average is None:
        problems.append(f"SWA's average_model_state lacks {name}")
        continue
    mean = (swa0["state_dict"][name] + swa1["state_dict"][name]) / 2
    if not torch.allclose(average, mean, rtol=1e-6, atol=1e-7):
        problems.append(f"SWA's average of {name} is not the mean of epochs 0 and 1's weights")
before = swa0["callbacks"]["StochasticWeightAveraging"]
expect("SWA's n_averaged before its first epoch", int(before["n_averaged"]), 0)
expect("SWALR's state before its first epoch", before["scheduler_state"], None)

state = ema2["callbacks"].get("EMAWeightAveraging")
if state is None:
    sys.exit(f"no 'EMAWeightAveraging' in the checkpoint's callbacks: {sorted(ema2['callbacks'])}")
expect("EMA's keys", sorted(state), ["average_model_state", "latest_update_epoch", "latest_update_step", "n_averaged"])
expect("EMA's n_averaged (one per optimizer step)", int(state["n_averaged"]), ema2["global_step"])
expect("EMA's latest_update_step", state["latest_update_step"], ema2["global_step"])
expect("EMA's averaged weights", sorted(state["average_model_state"]), sorted(ema2["state_dict"]))
if problems:
    sys.exit("\n".join(problems))
print("SWA's and EMA's checkpointed state: Lightning's keys and values")
PY

# 3. Resumed from the checkpoint of epoch 1 (SWA: its first averaged epoch), each ends as the uninterrupted run.
run swa_resumed --swa_lrs=0.05 --swa_epoch_start=2 --annealing_epochs=1 --ckpt_path="$(ckpt swa 1)"
run ema_resumed --ema_weight_averaging --ema_decay=0.9 --ckpt_path="$(ckpt ema 1)"
for name in swa ema; do
  [[ -n "$(sha ${name}_resumed.json)" && "$(sha ${name}_resumed.json)" == "$(sha $name.json)" ]] ||
    fail "$name: resumed from epoch 1, the weights are $(sha ${name}_resumed.json), not $(sha $name.json)"
done

# 4. LightningCLI's form in a config file.
cat >callbacks.yaml <<'YAML'
trainer:
  callbacks:
  - class_path: lightning.pytorch.callbacks.StochasticWeightAveraging
    init_args: {swa_lrs: 0.05, swa_epoch_start: 2, annealing_epochs: 1}
YAML
run swa_config --config=callbacks.yaml
[[ "$(sha swa_config.json)" == "$(sha swa.json)" ]] || fail "the config's StochasticWeightAveraging is not --swa_lrs's"
grep -q "class_path: lightning.pytorch.callbacks.StochasticWeightAveraging" swa_config/lightning_logs/version_0/config.yaml ||
  fail "the run's config.yaml does not hold StochasticWeightAveraging"
cat >ema.yaml <<'YAML'
trainer:
  callbacks:
  - class_path: EMAWeightAveraging
    init_args: {decay: 0.9}
YAML
run ema_config --config=ema.yaml
[[ "$(sha ema_config.json)" == "$(sha ema.json)" ]] || fail "the config's EMAWeightAveraging is not --ema_weight_averaging's"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "weight averaging through fit: checked"
