#!/usr/bin/env bash
# CSV files and the digits through the real //trainer:fit binary: a classification file with a header and text
# labels (plain and gzip), a regression file, background loading, the output folder, and predictions on rows the
# run never saw, scored here against labels the test kept back.
set -uo pipefail
fit=$PWD/trainer/cli/fit
python=/usr/bin/python3
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
field() { sed -n -E "s/.*\"$2\": \"?([^\",}]*)\"?.*/\1/p" "$1"; }
at_least() { awk -v a="${1:-nan}" -v b="$2" 'BEGIN {exit !(a >= b)}'; }

# Three species of flowers in four measurements; the label sits between the features. Rows to predict on come
# from the same distribution; their labels stay with the test.
$python - <<'PY' || exit 1
import random
random.seed(7)
centres = {"setosa": (5.0, 3.4, 1.5, 0.2), "versicolor": (5.9, 2.8, 4.3, 1.3), "virginica": (6.6, 3.0, 5.6, 2.0)}
def rows(n):
    out = []
    for _ in range(n):
        species = random.choice(sorted(centres))
        x = [c + random.gauss(0, 0.25) for c in centres[species]]
        out.append((x, species))
    return out
with open("flowers.csv", "w") as f:
    f.write("sepal_length,sepal_width,species,petal_length,petal_width\n")
    for x, s in rows(600):
        f.write("%.3f,%.3f,%s,%.3f,%.3f\n" % (x[0], x[1], s, x[2], x[3]))
with open("unseen.csv", "w") as f, open("unseen_labels.txt", "w") as labels:
    f.write("sepal_length,sepal_width,petal_length,petal_width\n")
    for x, s in rows(200):
        f.write("%.3f,%.3f,%.3f,%.3f\n" % tuple(x))
        labels.write(s + "\n")
# Regression: target = 3a - 2b + noise, in the first column.
with open("linear.csv", "w") as f, open("linear_unseen.csv", "w") as g:
    f.write("target,a,b\n")
    g.write("target,a,b\n")
    for i in range(1200):
        a, b = random.uniform(-2, 2), random.uniform(-2, 2)
        (f if i < 1000 else g).write("%.4f,%.4f,%.4f\n" % (3 * a - 2 * b + random.gauss(0, 0.1), a, b))
PY
gzip -c flowers.csv >flowers.csv.gz

common=(--enable_progress_bar=false --max_epochs=15 --label_column=species)
$fit "${common[@]}" --data=flowers.csv --default_root_dir=plain --summary_json=plain.json >plain.out 2>plain.err ||
  fail "the CSV run failed: $(tail -3 plain.err)"
cat plain.out
grep -q "Data: flowers.csv: 480 training and 120 validation rows, 4 features, 3 classes" plain.err ||
  fail "the data line is wrong: $(grep Data: plain.err)"
at_least "$(awk '$1 == "val_acc" {print $2}' plain.out)" 0.9 || fail "val_acc on flowers.csv is below 0.9"

# The same file gzip-compressed, and loaded without background threads: the very same training, bit for bit.
$fit "${common[@]}" --data=flowers.csv.gz --default_root_dir=gzip --summary_json=gzip.json >/dev/null 2>gzip.err ||
  fail "the gzip run failed: $(tail -3 gzip.err)"
$fit "${common[@]}" --data=flowers.csv --num_workers=0 --default_root_dir=sync --summary_json=sync.json \
  >/dev/null 2>sync.err || fail "the --num_workers=0 run failed: $(tail -3 sync.err)"
sha=$(field plain.json params_sha256)
[[ ${#sha} -eq 64 ]] || fail "no params_sha256 in the summary"
[[ $(field gzip.json params_sha256) == "$sha" ]] || fail "the gzip file trained differently from the plain one"
[[ $(field sync.json params_sha256) == "$sha" ]] || fail "background loading changed the training"

# The output folder, laid out like Lightning's.
run=plain/lightning_logs/version_0
[[ $(field plain.json log_dir) == "$run" ]] || fail "log_dir is '$(field plain.json log_dir)'"
ls -R "$run"
header=$(head -1 "$run/metrics.csv")
[[ "$header" == "epoch,step,train_acc,train_loss_epoch,train_loss_step,val_acc,val_loss" ]] ||
  fail "metrics.csv header is '$header'"
# One validation row per epoch (480 rows, batches of 64: 8 steps per epoch), numbered as Lightning numbers them:
# at the step of the epoch's last batch, counted from 0 (7, 15, ...), and with its epoch.
val_rows=$(awk -F, 'NR > 1 && $6 != "" {printf "%s:%s ", $1, $2}' "$run/metrics.csv")
expected=$(for e in $(seq 0 14); do printf "%s:%s " "$e" $((8 * e + 7)); done)
[[ "$val_rows" == "$expected" ]] || fail "validation rows (epoch:step) are '$val_rows', not '$expected'"
grep -qx "data: flowers.csv" "$run/hparams.yaml" || fail "hparams.yaml lacks the data: $(cat "$run/hparams.yaml")"
grep -qx "num_outputs: 3" "$run/hparams.yaml" || fail "hparams.yaml lacks num_outputs"
[[ -s "$run/report.html" && -s "$run/checkpoints/last.ckpt" ]] || fail "no report.html or last.ckpt"

# Predictions on unseen rows (no label column), from the newest checkpoint.
$fit --mode=predict --ckpt_path=last --data=flowers.csv --label_column=species --default_root_dir=plain \
  --predict_data=unseen.csv --predictions=unseen_predictions.csv >predict.out 2>predict.err ||
  fail "predict failed: $(tail -3 predict.err)"
cat predict.out
grep -q "Wrote 200 predictions to unseen_predictions.csv" predict.out || fail "predict did not report 200 rows"
[[ $(head -1 unseen_predictions.csv) == "index,prediction,prob_setosa,prob_versicolor,prob_virginica" ]] ||
  fail "predictions header is '$(head -1 unseen_predictions.csv)'"
accuracy=$(paste -d, <(tail -n +2 unseen_predictions.csv) unseen_labels.txt |
  awk -F, '{ right += ($2 == $6); sum = $3 + $4 + $5; if (sum < 0.999 || sum > 1.001) bad++ }
           END { if (bad) print "bad"; else print right / NR }')
echo "accuracy on unseen rows: $accuracy"
at_least "$accuracy" 0.9 || fail "predictions on unseen rows: accuracy '$accuracy' (or probabilities not summing to 1)"

# Predicting and validating need only the checkpoint and the data to run on: from another folder, where
# flowers.csv is not, with no model or data flags, the same predictions; and validation of the training file with
# the checkpoint's statistics gives the training run's last val_acc.
mkdir elsewhere
checkpoint=$work/$run/checkpoints/last.ckpt
(cd elsewhere && $fit --mode=predict --ckpt_path="$checkpoint" --predict_data="$work/unseen.csv" \
  --predictions=alone.csv >alone.out 2>alone.err) || fail "predict from the checkpoint alone failed: $(tail -3 elsewhere/alone.err)"
taken=$(grep "^From .*last.ckpt: " elsewhere/alone.err)
[[ "$taken" == *" --model=mlp"* && "$taken" == *" --data=flowers.csv"* ]] ||
  fail "predict did not say what it took from the checkpoint: $(head -3 elsewhere/alone.err)"
grep -q "epoch 14" elsewhere/alone.err || fail "predict did not say the checkpoint's epoch: $(grep -i checkpoint elsewhere/alone.err)"
cmp -s elsewhere/alone.csv unseen_predictions.csv || fail "predictions from the checkpoint alone differ"
(cd elsewhere && $fit --mode=validate --ckpt_path="$checkpoint" --data="$work/flowers.csv" >validate.out \
  2>validate.err) || fail "validate from the checkpoint failed: $(tail -3 elsewhere/validate.err)"
trained=$(awk '$1 == "val_acc" {print $2}' plain.out)
validated=$(awk '$1 == "val_acc" {print $2}' elsewhere/validate.out)
[[ -n "$trained" && "$validated" == "$trained" ]] || fail "validate gave val_acc '$validated', training ended at '$trained'"
# --mode=test: the held-out rows again (a table's test rows are its validation rows), under test_ names.
(cd elsewhere && $fit --mode=test --ckpt_path="$checkpoint" --data="$work/flowers.csv" --limit_test_batches=1 \
  >test.out 2>test.err) || fail "test from the checkpoint failed: $(tail -3 elsewhere/test.err)"
grep -q "test_acc" elsewhere/test.out || fail "--mode=test printed no test_acc: $(cat elsewhere/test.out)"

# Regression, label by index; predictions on a file that still has its label column (which is skipped).
$fit --data=linear.csv --task=regression --label_column=0 --max_epochs=20 --enable_progress_bar=false \
  --default_root_dir=reg >reg.out 2>reg.err || fail "the regression run failed: $(tail -3 reg.err)"
cat reg.out
mae=$(awk '$1 == "val_mae" {print $2}' reg.out)
awk -v m="${mae:-99}" 'BEGIN {exit !(m < 0.3)}' || fail "val_mae '$mae' is not below 0.3 (the target's spread is ~3)"
$fit --mode=predict --ckpt_path=last --data=linear.csv --task=regression --label_column=0 --default_root_dir=reg \
  --predict_data=linear_unseen.csv >/dev/null 2>reg_predict.err || fail "regression predict failed: $(tail -3 reg_predict.err)"
[[ $(head -1 reg/predictions.csv) == "index,prediction" ]] || fail "regression predictions header"
unseen_mae=$(paste -d, <(tail -n +2 reg/predictions.csv) <(tail -n +2 linear_unseen.csv) |
  awk -F, '{ d = $2 - $3; s += (d < 0 ? -d : d) } END { print s / NR }')
echo "mean absolute error on unseen rows: $unseen_mae"
awk -v m="${unseen_mae:-99}" 'BEGIN {exit !(m < 0.3)}' || fail "regression predictions: mean absolute error $unseen_mae"

# A target in large units (around 5000, spread about 2000): the model learns it standardised with the training
# rows' statistics, so it does far better than always predicting the mean, and answers in the target's units.
$python - <<'PY' || exit 1
import random
random.seed(8)
with open("big.csv", "w") as f, open("big_unseen.csv", "w") as g:
    f.write("a,b,target\n")
    g.write("a,b,target\n")
    for i in range(1200):
        a, b = random.uniform(-2, 2), random.uniform(-2, 2)
        (f if i < 1000 else g).write("%.4f,%.4f,%.2f\n" % (a, b, 5000 + 800 * (3 * a - 2 * b) + random.gauss(0, 50)))
PY
baseline=$($python -c "
rows = [float(l.split(',')[2]) for l in open('big.csv').read().split()[1:]]
mean = sum(rows) / len(rows)
print(sum(abs(r - mean) for r in rows) / len(rows))")
$fit --data=big.csv --task=regression --max_epochs=20 --enable_progress_bar=false --default_root_dir=big \
  >big.out 2>big.err || fail "the large-target run failed: $(tail -3 big.err)"
big_mae=$(awk '$1 == "val_mae" {print $2}' big.out)
echo "large target: val_mae $big_mae, always predicting the mean: $baseline"
awk -v m="${big_mae:-1e9}" -v b="$baseline" 'BEGIN {exit !(m < 0.1 * b)}' ||
  fail "val_mae $big_mae is not below a tenth of the mean predictor's $baseline"
$fit --mode=predict --ckpt_path=last --default_root_dir=big --predict_data=big_unseen.csv >/dev/null 2>big_predict.err ||
  fail "large-target predict failed: $(tail -3 big_predict.err)"
big_unseen=$(paste -d, <(tail -n +2 big/predictions.csv) <(tail -n +2 big_unseen.csv) |
  awk -F, '{ d = $2 - $5; s += (d < 0 ? -d : d) } END { print s / NR }')
echo "large target: mean absolute error on unseen rows $big_unseen"
awk -v m="${big_unseen:-1e9}" -v b="$baseline" 'BEGIN {exit !(m < 0.1 * b)}' ||
  fail "large-target predictions are not in the target's units: mean absolute error $big_unseen"

# The UCI digits that python3-sklearn ships, with the small ConvNet on 8x8 images.
$fit --data=digits --model=cnn --max_epochs=10 --enable_progress_bar=false --default_root_dir=digits \
  >digits.out 2>digits.err || fail "the digits run failed: $(tail -3 digits.err)"
cat digits.out
grep -q "Data: digits: 1438 training and 359 validation rows, 64 features, 10 classes" digits.err ||
  fail "the digits data line is wrong: $(grep Data: digits.err)"
grep -q "features   | Sequential" digits.err || fail "no ConvNet summary: $(grep -A4 Name digits.err)"
at_least "$(awk '$1 == "val_acc" {print $2}' digits.out)" 0.9 || fail "digits val_acc is below 0.9"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "CSV and digits checks passed"
