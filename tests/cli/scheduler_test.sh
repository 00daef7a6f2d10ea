#!/usr/bin/env bash
# Learning-rate schedulers through the real //trainer:fit binary:
#   1. each schedule's rates, as LearningRateMonitor logs them in metrics.csv (lr-SGD at every step), against the
#      rates Debian's PyTorch (python3-torch, 1.13) gives for the same settings and the same number of steps; the
#      plateau schedules are fed the val_loss values the run itself logged;
#   2. resuming each schedule from a mid-epoch checkpoint (and the plateau from an epoch-end one) ends with
#      parameters bit-for-bit equal to the uninterrupted run's (params_sha256);
#   3. bad scheduler flags are refused before anything is written, naming the value and what to pass.
set -uo pipefail
source "$PWD/tests/cli/python_torch.sh"

# 256 rows in batches of 32: 8 optimizer steps an epoch, 48 in the run.
common=(--num_train=256 --num_val=64 --batch_size=32 --max_epochs=6 --optimizer=sgd --learning_rate=0.1
        --log_every_n_steps=1 --enable_progress_bar=false --report=false --enable_model_summary=false)
steps_per_epoch=8

# Each case: a name, then its flags. The checker below rebuilds the same schedule in PyTorch from the name.
cases=(
  "step_epoch --lr_scheduler=step --step_size=2 --gamma=0.5"
  "step_step --lr_scheduler=step --lr_scheduler_interval=step --step_size=5 --gamma=0.7"
  "cosine_step --lr_scheduler=cosine --lr_scheduler_interval=step --eta_min=0.001"
  "cosine_epoch_warmup --lr_scheduler=cosine --warmup_iters=2 --warmup_start_factor=0.25"
  "onecycle_step --lr_scheduler=onecycle --lr_scheduler_interval=step --max_lr=0.5"
  "warmup_step --lr_scheduler_interval=step --warmup_iters=10 --warmup_start_factor=0.1"
  "plateau_epoch --lr_scheduler=plateau --plateau_mode=max --plateau_patience=1 --plateau_factor=0.5"
  "plateau_warmup --lr_scheduler=plateau --plateau_mode=max --plateau_patience=0 --warmup_iters=2"
)

check_rates() {  # check_rates <case> <metrics.csv>
  $python - "$1" "$2" "$steps_per_epoch" <<'PY'
import csv, sys, warnings
warnings.filterwarnings("ignore")
import torch
from torch.optim import lr_scheduler as S
name, path, per_epoch = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = list(csv.DictReader(open(path)))
logged = {}
for r in rows:
    if r.get("lr-SGD"):
        logged[int(r["step"])] = float(r["lr-SGD"])
val_loss = [float(r["val_loss"]) for r in rows if r.get("val_loss")]
total = 6 * per_epoch
o = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
epoch_interval = True
plateau = None
if name == "step_epoch":
    s = S.StepLR(o, step_size=2, gamma=0.5)
elif name == "step_step":
    s, epoch_interval = S.StepLR(o, step_size=5, gamma=0.7), False
elif name == "cosine_step":
    s, epoch_interval = S.CosineAnnealingLR(o, T_max=total, eta_min=0.001), False
elif name == "cosine_epoch_warmup":
    w = S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=2)
    s = S.SequentialLR(o, [w, S.CosineAnnealingLR(o, T_max=6 - 2)], milestones=[2])
elif name == "onecycle_step":
    s, epoch_interval = S.OneCycleLR(o, max_lr=0.5, total_steps=total, cycle_momentum=False), False
elif name == "warmup_step":
    s, epoch_interval = S.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=10), False
elif name == "plateau_epoch":
    s, plateau = None, S.ReduceLROnPlateau(o, mode="max", patience=1, factor=0.5)
elif name == "plateau_warmup":
    s = S.LinearLR(o, start_factor=1.0 / 3, end_factor=1.0, total_iters=2)
    plateau = S.ReduceLROnPlateau(o, mode="max", patience=0)
# The rate during each optimizer step (before it), from 0 to total - 1.
expected = []
for step in range(total):
    expected.append(o.param_groups[0]["lr"])
    o.step()
    last_of_epoch = (step + 1) % per_epoch == 0
    if epoch_interval and last_of_epoch:
        if s is not None:
            s.step()
        if plateau is not None:
            plateau.step(val_loss[(step + 1) // per_epoch - 1])  # The epoch's validation, logged once an epoch.
    elif not epoch_interval:
        s.step()
steps = sorted(logged)
if steps != list(range(total)):
    sys.exit("%s: lr-SGD logged at steps %s, wanted 0..%d" % (name, steps, total - 1))
bad = [(k, logged[k], expected[k]) for k in steps if abs(logged[k] - expected[k]) > 1e-9 * max(1e-12, expected[k])]
if bad:
    sys.exit("%s: rates differ from PyTorch's at (step, logged, expected): %s" % (name, bad[:5]))
if len(set(round(v, 15) for v in logged.values())) < 2:
    sys.exit("%s: the rate never changed: %s" % (name, sorted(set(logged.values()))))
print("%s: %d rates match PyTorch's, from %g to %g" % (name, len(steps), logged[0], logged[total - 1]))
PY
}

for case in "${cases[@]}"; do
  read -r name flags <<<"$case"
  # shellcheck disable=SC2086
  $fit "${common[@]}" $flags --default_root_dir="$work/rates_$name" >"$work/rates_$name.log" 2>&1 ||
    { fail "$name: fit failed: $(tail -3 "$work/rates_$name.log")"; continue; }
  check_rates "$name" "$work/rates_$name/lightning_logs/version_0/metrics.csv" || fail "$name: rates"
done

# Resuming: the uninterrupted run keeps every checkpoint (at each epoch's end and every 5 steps); the resumed run
# starts from one of them in another folder, with the same flags, and must end with the same parameters. Step 20 is
# mid-epoch 2 (steps 16-23), after two epoch-end steps of the epoch schedules; step 16 ends epoch 1.
resume_from() {  # resume_from <case> <flags> <checkpoint file name>
  local name=$1 flags=$2 ckpt=$3 tag
  tag="${name}_${3%%.ckpt}"
  tag=${tag//=/_}
  # shellcheck disable=SC2086
  $fit "${common[@]}" $flags --ckpt_path="$work/resume_$name/lightning_logs/version_0/checkpoints/$ckpt" \
    --default_root_dir="$work/resumed_$tag" --summary_json="$work/resumed_$tag.json" >"$work/resumed_$tag.log" 2>&1 ||
    { fail "$name: resuming from $ckpt failed: $(tail -3 "$work/resumed_$tag.log")"; return; }
  # The summary names the checkpoint (glog's "Restored from" line is not written in every build's logging setup).
  [[ $(field "$work/resumed_$tag.json" resumed_from) == */$ckpt ]] || fail "$name: the run from $ckpt did not restore it"
  local a b
  a=$(field "$work/resume_$name.json" params_sha256)
  b=$(field "$work/resumed_$tag.json" params_sha256)
  [[ ${#a} -eq 64 ]] || { fail "$name: no params_sha256 in the uninterrupted run's summary"; return; }
  if [[ "$a" == "$b" ]]; then
    echo "$name: resumed from $ckpt, parameters match the uninterrupted run's"
  else
    fail "$name: resumed from $ckpt, parameters differ from the uninterrupted run's ($a vs $b)"
  fi
}
for case in "${cases[@]}"; do
  read -r name flags <<<"$case"
  # shellcheck disable=SC2086
  $fit "${common[@]}" $flags --every_n_train_steps=5 --save_top_k=-1 --default_root_dir="$work/resume_$name" \
    --summary_json="$work/resume_$name.json" >"$work/resume_$name.log" 2>&1 ||
    { fail "$name: uninterrupted run failed: $(tail -3 "$work/resume_$name.log")"; continue; }
  resume_from "$name" "$flags" "epoch=2-step=20.ckpt"
  [[ $name == plateau* ]] && resume_from "$name" "$flags" "epoch=1-step=16.ckpt"
done
# The resume test can fail: a run whose schedule differs from the checkpoint's ends elsewhere.
read -r _ flags <<<"${cases[0]}"
$fit "${common[@]}" --lr_scheduler=step --step_size=3 --gamma=0.5 \
  --ckpt_path="$work/resume_step_epoch/lightning_logs/version_0/checkpoints/epoch=2-step=20.ckpt" \
  --default_root_dir="$work/resumed_other" --summary_json="$work/resumed_other.json" >/dev/null 2>&1
[[ $(field "$work/resumed_other.json" params_sha256) != $(field "$work/resume_step_epoch.json" params_sha256) ]] ||
  fail "a resumed run with another step_size ended with the same parameters: the comparison cannot fail"

# Bad values: one error line naming the value and what to pass, exit status 2, nothing written.
expect_usage_error() {  # expect_usage_error <stderr fragment> <flags>...
  local fragment=$1
  shift
  local dir
  dir=$(mktemp -d "$work/bad_XXXX")
  local err code
  err=$(cd "$dir" && $fit "${common[@]}" --default_root_dir="$dir" "$@" 2>&1 >/dev/null)
  code=$?
  if [[ $code -ne 2 ]]; then fail "fit $* exited $code, wanted 2: $err"; return; fi
  [[ $(grep -c "^error: " <<<"$err") -eq 1 ]] || fail "fit $*: not exactly one 'error: ' line in: $err"
  grep -qF -- "$fragment" <<<"$(grep "^error: " <<<"$err")" || fail "fit $*: '$fragment' not in: $err"
  [[ -z "$(ls -A "$dir")" ]] || fail "fit $* wrote $(ls -A "$dir")"
}
expect_usage_error "--lr_scheduler='exponential' is not valid; pass none, step, cosine, plateau or onecycle" \
  --lr_scheduler=exponential
expect_usage_error "--lr_scheduler_interval='batch' is not valid; pass epoch or step" --lr_scheduler_interval=batch
expect_usage_error "--lr_scheduler_frequency='0' is not valid; pass an int >= 1" --lr_scheduler_frequency=0
expect_usage_error "--gamma='0' is not valid; pass a value > 0" --lr_scheduler=step --gamma=0
expect_usage_error "--step_size='0' is not valid; pass an int >= 1" --lr_scheduler=step --step_size=0
expect_usage_error "--eta_min='-1' is not valid; pass a value >= 0" --lr_scheduler=cosine --eta_min=-1
expect_usage_error "--T_max='0' is not valid; the run has no epoch limit" --lr_scheduler=cosine --max_epochs=-1 \
  --max_steps=100
expect_usage_error "--warmup_iters='6' is not valid; the warm-up leaves none of the 6 epochs" --lr_scheduler=cosine \
  --warmup_iters=6
expect_usage_error "--warmup_iters='3' is not valid; OneCycleLR warms up by itself" --lr_scheduler=onecycle \
  --warmup_iters=3
expect_usage_error "--warmup_iters='-1' is not valid" --warmup_iters=-1
expect_usage_error "--warmup_start_factor='0' is not valid; pass a value in (0, 1]" --warmup_iters=2 \
  --warmup_start_factor=0
expect_usage_error "--pct_start='2' is not valid; pass a value in [0, 1]" --lr_scheduler=onecycle --pct_start=2
expect_usage_error "--anneal_strategy='cosine' is not valid; pass cos or linear" --anneal_strategy=cosine
expect_usage_error "--div_factor='0' is not valid" --div_factor=0
expect_usage_error "--plateau_mode='up' is not valid; pass min or max" --lr_scheduler=plateau --plateau_mode=up
expect_usage_error "--plateau_factor='1.5' is not valid; pass a value in (0, 1)" --plateau_factor=1.5
expect_usage_error "--plateau_patience='-1' is not valid; pass an int >= 0" --plateau_patience=-1
expect_usage_error "--plateau_threshold_mode='relative' is not valid; pass rel or abs" \
  --plateau_threshold_mode=relative
expect_usage_error "--min_lr='-0.1' is not valid; pass a value >= 0" --min_lr=-0.1
expect_usage_error "--lr_scheduler_monitor='' is not valid" --lr_scheduler=plateau --lr_scheduler_monitor=

# A plateau on a metric the model never logs is refused before the run (exit 2, nothing written), naming the metrics
# there are. (A library program's Trainer stops at the first epoch's end instead: //trainer:trainer_test.)
err=$($fit "${common[@]}" --lr_scheduler=plateau --lr_scheduler_monitor=val_nope --default_root_dir="$work/nope" 2>&1)
code=$?
[[ $code -eq 2 ]] || fail "a plateau on a metric never logged: exit $code, not 2"
grep -q "lr_scheduler_monitor='val_nope' is not valid; the model logs .*val_loss.*; did you mean val_loss?" <<<"$err" ||
  fail "no clear error for the missing metric: $(tail -3 <<<"$err")"
[[ ! -e "$work/nope" ]] || fail "the refused run wrote $(find "$work/nope" | head -3 | tr '\n' ' ')"

# --help lists the scheduler flags in their group.
help=$($fit --help 2>&1)
for flag in lr_scheduler lr_scheduler_interval warmup_iters T_max max_lr plateau_patience min_lr; do
  grep -q -- "--$flag=" <<<"$help" || fail "--help does not list --$flag"
done
grep -q "Learning-rate scheduler" <<<"$help" || fail "--help has no learning-rate scheduler group"

[[ $failures -eq 0 ]] && echo "PASS"
exit $failures
