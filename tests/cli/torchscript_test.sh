#!/usr/bin/env bash
# A model exported from Python with torch.jit.script, created here by the test, trained by the real //trainer:fit
# with no Python involved; then checked from Python: Kiln trained the module's own parameters (same digest before
# training, same predictions after), and resuming through --ckpt_path=last is exact.
set -uo pipefail
script=$PWD/tests/cli/torchscript_model.py
inflating=$PWD/trainer/models/testdata/inflating_model.pt
source "$PWD/tests/cli/python_torch.sh"

# Data: four classes in 6 features, and rows to predict on, written by the test.
$python - <<'PY' || exit 1
import random
random.seed(11)
centres = [[random.gauss(0, 1.5) for _ in range(6)] for _ in range(4)]
def write(name, n, label):
    with open(name, "w") as f:
        f.write(",".join("x%d" % i for i in range(6)) + (",label" if label else "") + "\n")
        for _ in range(n):
            c = random.randrange(4)
            x = [m + random.gauss(0, 1) for m in centres[c]]
            f.write(",".join("%.4f" % v for v in x) + (",%d" % c if label else "") + "\n")
write("train.csv", 2000, True)
write("rows.csv", 100, False)
PY

initial=$($python "$script" make net.pt 6 4) || fail "could not export the model"
echo "exported net.pt; parameters sha256 $initial"
# --normalize=false: the rows reach the model as written, so that Python can predict on the same numbers.
common=(--data=train.csv --model=net.pt --normalize=false --enable_progress_bar=false --batch_size=32)

# No step: the parameters are exactly the exported ones, in the module's own order.
$fit "${common[@]}" --max_steps=0 --default_root_dir=zero --summary_json=zero.json >/dev/null 2>zero.err ||
  fail "the zero-step run failed: $(tail -3 zero.err)"
[[ $(field zero.json params_sha256) == "$initial" ]] || fail "Kiln's parameters are not the exported module's"
grep -q "norm | BatchNorm1d" zero.err || fail "the model summary does not show the script's layers"

# Training.
$fit "${common[@]}" --max_epochs=6 --default_root_dir=full --summary_json=full.json >full.out 2>full.err ||
  fail "training the TorchScript module failed: $(tail -3 full.err)"
cat full.out
awk -v a="$(awk '$1 == "val_acc" {print $2}' full.out)" 'BEGIN {exit !(a > 0.8)}' || fail "val_acc is not above 0.8"
trained=$(field full.json params_sha256)
[[ "$trained" != "$initial" && ${#trained} -eq 64 ]] || fail "training did not change the parameters"

# Predictions: Kiln's, and Python's with the parameters and buffers from Kiln's checkpoint, must agree.
$fit "${common[@]}" --mode=predict --ckpt_path=last --default_root_dir=full --predict_data=rows.csv \
  --predictions=kiln.csv >/dev/null 2>predict.err || fail "predict failed: $(tail -3 predict.err)"
python_sha=$($python "$script" predict net.pt full/lightning_logs/version_0/checkpoints/last.ckpt rows.csv python.csv) ||
  fail "Python could not load Kiln's checkpoint into the module"
[[ "$python_sha" == "$trained" ]] || fail "the checkpoint's parameters differ from the run's final ones"
worst=$(paste -d, <(tail -n +2 kiln.csv | cut -d, -f3-) python.csv |
  awk -F, '{ for (i = 1; i <= 4; i++) { d = $i - $(i + 4); d = d < 0 ? -d : d; if (d > w) w = d } } END { print w + 0 }')
echo "largest difference between Kiln's and Python's probabilities: $worst"
[[ $(wc -l <python.csv) -eq 100 ]] || fail "Python predicted $(wc -l <python.csv) rows, not 100"
awk -v w="$worst" 'BEGIN {exit !(w < 1e-5)}' || fail "Kiln's and Python's predictions differ by $worst"

# Resuming: 3 epochs, then --ckpt_path=last up to 6, ends where the uninterrupted 6 epochs ended (dropout's random
# numbers and batch norm's running statistics included).
$fit "${common[@]}" --max_epochs=3 --default_root_dir=split >/dev/null 2>split1.err || fail "first half failed"
$fit "${common[@]}" --max_epochs=6 --default_root_dir=split --ckpt_path=last --summary_json=split.json >/dev/null \
  2>split2.err || fail "the resumed half failed: $(tail -3 split2.err)"
[[ $(field split.json resumed_from) == split/lightning_logs/version_0/checkpoints/* ]] ||
  fail "the second half did not resume from the first: '$(field split.json resumed_from)'"
[[ $(field split.json params_sha256) == "$trained" ]] || fail "the resumed run differs from the uninterrupted one"

# A model whose deflated records inflate past --max_inflated_mib (a 32 MiB buffer in 35 KB) is refused from its zip
# directory before LibTorch reads it: exit 2, naming the file and the flag, nothing written.
$fit --model="$inflating" --max_inflated_mib=8 --max_epochs=1 --default_root_dir=inflating >/dev/null 2>inflating.err
code=$?
[[ $code -eq 2 ]] || fail "a model inflating past --max_inflated_mib: exit $code, not 2: $(tail -3 inflating.err)"
grep -q "^error: --model=.*inflating_model.pt: .*max_inflated_mib" inflating.err ||
  fail "the refusal names neither the model nor the flag: $(cat inflating.err)"
[[ ! -e inflating ]] || fail "the refused run wrote $(ls -R inflating)"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "TorchScript checks passed"
