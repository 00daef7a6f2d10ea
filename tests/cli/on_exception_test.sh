#!/usr/bin/env bash
# fit's --on_exception_dirpath (Lightning's OnExceptionCheckpoint): a TorchScript model whose 6th training forward
# raises (tests/cli/failing_model.py) makes fit fail with the step's error after writing <dir>/on_exception.ckpt at
# global step 5, which fit resumes from; a NaN loss at the same step stops fit without one; a run that succeeds
# removes a stale one; the same from a config file (trainer.callbacks), and --print_config writes the callback.
set -uo pipefail
script=$PWD/tests/cli/failing_model.py
source "$PWD/tests/cli/python_torch.sh"
$python - <<'PY' || exit 1
import random
random.seed(5)
with open("train.csv", "w") as f:
    f.write("x0,x1,x2,x3,label\n")
    for r in range(200):
        f.write(",".join("%.4f" % random.gauss(0, 1) for _ in range(4)) + ",%d\n" % (r % 3))
PY
$python "$script" raise.pt 4 3 6 raise && $python "$script" nan.pt 4 3 6 nan || { echo "FAIL: no models"; exit 1; }
common=(--data=train.csv --normalize=false --batch_size=16 --max_epochs=2 --enable_progress_bar=false)

"$fit" "${common[@]}" --model="$PWD/raise.pt" --on_exception_dirpath=crash --default_root_dir=raise >raise.log 2>&1
rc=$?
[[ $rc == 1 ]] || fail "fit exited $rc, not 1, when the step raised"
grep -q "error: training_step raised: .*the step failed on purpose" raise.log || fail "fit did not report the step's error"
[[ -f crash/on_exception.ckpt ]] || fail "no crash/on_exception.ckpt: $(ls crash 2>&1)"
[[ -z $(ls crash | grep -v '^on_exception.ckpt$') ]] || fail "files beside the checkpoint: $(ls crash)"
# Resumed, it continues from global step 5 (the model's counter starts again, so 2 more steps do not reach it).
"$fit" "${common[@]}" --model="$PWD/raise.pt" --ckpt_path=crash/on_exception.ckpt --max_steps=7 \
  --default_root_dir=resumed >resumed.log 2>&1 || { tail -3 resumed.log; fail "fit did not resume from the checkpoint"; }
grep -q "global step 5)" resumed.log || fail "the resume did not start at global step 5: $(grep -a Restored resumed.log)"

"$fit" "${common[@]}" --model="$PWD/nan.pt" --on_exception_dirpath=nan_crash --default_root_dir=nan >nan.log 2>&1
rc=$?
[[ $rc == 1 ]] || fail "fit exited $rc, not 1, at a NaN loss"
grep -q "the training loss is nan" nan.log || fail "fit did not stop for the NaN loss"
[[ ! -e nan_crash/on_exception.ckpt ]] || fail "a NaN stop wrote a checkpoint"

mkdir -p stale && echo "an old crash" >stale/last_crash.ckpt
"$fit" "${common[@]}" --max_epochs=1 --on_exception_dirpath=stale --on_exception_filename=last_crash \
  --default_root_dir=ok >ok.log 2>&1 || { tail -3 ok.log; fail "a plain run failed"; }
[[ ! -e stale/last_crash.ckpt ]] || fail "a run that succeeded left the stale stale/last_crash.ckpt"

# From a config file, as LightningCLI writes the callback; and --print_config writes it back.
cat >config.yaml <<'YAML'
trainer:
  callbacks:
    - class_path: lightning.pytorch.callbacks.OnExceptionCheckpoint
      init_args: {dirpath: config_crash, filename: boom}
YAML
"$fit" "${common[@]}" --model="$PWD/raise.pt" --config=config.yaml --default_root_dir=config >config.log 2>&1
[[ -f config_crash/boom.ckpt ]] || fail "the config's OnExceptionCheckpoint wrote no config_crash/boom.ckpt"
"$fit" --config=config.yaml --print_config >printed.yaml 2>/dev/null || fail "--print_config failed"
grep -q "OnExceptionCheckpoint" printed.yaml && grep -q "filename: boom" printed.yaml ||
  fail "--print_config did not write the callback: $(grep -A3 OnException printed.yaml)"
printf 'trainer:\n  callbacks:\n    - class_path: OnExceptionCheckpoint\n' >nodir.yaml
"$fit" --config=nodir.yaml >nodir.log 2>&1
[[ $? == 2 ]] && grep -q "OnExceptionCheckpoint needs dirpath" nodir.log || fail "a config without dirpath was not refused"
"$fit" --on_exception_dirpath=x --on_exception_filename= >empty.log 2>&1
[[ $? == 2 ]] && grep -q "on_exception_filename" empty.log || fail "an empty --on_exception_filename was not refused"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: --on_exception_dirpath saved where the step raised (resumable), nothing at a NaN stop, removed a stale" \
  "file after success; the config file's callback too"
