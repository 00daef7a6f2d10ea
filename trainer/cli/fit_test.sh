#!/usr/bin/env bash
# Drives the real //trainer:fit binary: the default run, --help, and every bad-flag case, each of which must exit 2
# with exactly one `error: ` line naming the flag and what is accepted, and must write nothing.
set -uo pipefail
fit=$PWD/trainer/cli/fit
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

# The default run (no flags but a shorter schedule and a folder to write to) trains well above chance.
mkdir -p "$work/default"
# ModelCheckpoint and EarlyStopping from the command line: the two best checkpoints by val_loss, named by it, and a
# stop once val_acc has not risen for one validation (the synthetic task's val_acc plateaus within a few epochs).
mkdir -p "$work/callbacks" && cd "$work/callbacks" || exit 1
callbacks_out=$($fit --max_epochs=40 --num_train=1024 --num_val=256 --enable_progress_bar=false --report=false \
  --checkpoint_monitor=val_loss --save_top_k=2 --checkpoint_filename="{epoch}-{val_loss:.3f}" \
  --early_stopping_monitor=val_acc --early_stopping_mode=max --patience=1 2>"$work/callbacks.err")
epochs=$(sed -n -E 's/.* for ([0-9]+) epochs.*/\1/p' <<<"$callbacks_out")
[[ -n "$epochs" && "$epochs" -lt 40 ]] || fail "EarlyStopping did not stop before 40 epochs: '$callbacks_out' $(tail -3 "$work/callbacks.err")"
kept=$(cd lightning_logs/version_0/checkpoints 2>/dev/null && ls | grep -c '^epoch=[0-9]*-val_loss=[0-9.]*\.ckpt$')
[[ "$kept" == 2 ]] || fail "--save_top_k=2 with --checkpoint_filename kept '$kept' files: $(ls lightning_logs/version_0/checkpoints)"
[[ -s lightning_logs/version_0/checkpoints/last.ckpt ]] || fail "no last.ckpt beside the monitored checkpoints"
# ThroughputMonitor from the command line: Lightning's keys in metrics.csv, MFU only with a peak (the CPU declares
# none), the callback in config.yaml, which runs again with it.
mkdir -p "$work/throughput" && cd "$work/throughput" || exit 1
$fit --max_epochs=1 --num_train=256 --num_val=64 --batch_size=32 --log_every_n_steps=1 --enable_progress_bar=false \
  --logger=csv --throughput_monitor --throughput_window_size=2 >/dev/null 2>"$work/throughput.err" ||
  fail "--throughput_monitor: the run failed: $(tail -3 "$work/throughput.err")"
header=$(head -1 lightning_logs/version_0/metrics.csv 2>/dev/null)
for key in train/device/samples_per_sec train/device/batches_per_sec train/device/flops_per_sec train/samples \
  validate/device/samples_per_sec; do
  grep -q "$key" <<<"$header" || fail "--throughput_monitor: no $key column in metrics.csv: $header"
done
grep -q "mfu" <<<"$header" && fail "--throughput_monitor on the CPU logged an MFU without a peak: $header"
grep -q "class_path: lightning.pytorch.callbacks.ThroughputMonitor" lightning_logs/version_0/config.yaml ||
  fail "config.yaml does not list ThroughputMonitor: $(cat lightning_logs/version_0/config.yaml)"
grep -q "window_size: 2" lightning_logs/version_0/config.yaml || fail "config.yaml does not hold window_size: 2"
$fit --config=lightning_logs/version_0/config.yaml --throughput_available_flops=1e12 >/dev/null \
  2>"$work/throughput.err" || fail "--throughput_monitor: the config's run failed: $(tail -3 "$work/throughput.err")"
grep -q "train/device/mfu" <<<"$(head -1 lightning_logs/version_1/metrics.csv 2>/dev/null)" ||
  fail "--throughput_available_flops with the config's ThroughputMonitor logged no train/device/mfu"
cd "$work/default" || exit 1
out=$($fit --max_epochs=5 --enable_progress_bar=false 2>"$work/default.err")
status=$?
echo "$out"
[[ $status -eq 0 ]] || fail "default run exited $status: $(cat "$work/default.err")"
grep -q "Trained on cpu (single_device, 32-true) for 5 epochs" <<<"$out" || fail "no training summary line"
# Four classes: chance accuracy is 0.25. A trained MLP must be far above it.
val_acc=$(awk '$1 == "val_acc" {print $2}' <<<"$out")
awk -v a="${val_acc:-0}" 'BEGIN {exit !(a > 0.85)}' || fail "val_acc '${val_acc}' is not above 0.85"
# Lightning's layout in the working directory: lightning_logs/version_0 with logs, report and checkpoints.
for file in metrics.csv hparams.yaml report.html checkpoints/last.ckpt; do
  [[ -s "lightning_logs/version_0/$file" ]] || fail "the default run did not write lightning_logs/version_0/$file"
done
# The model summary went to standard error.
grep -q "Total params" "$work/default.err" || fail "no model summary on standard error"
# --fast_dev_run takes Lightning's true and false as well as a number of batches: true is one batch.
mkdir -p "$work/fast" && cd "$work/fast" || exit 1
fast=$($fit --fast_dev_run=true --enable_progress_bar=false 2>"$work/fast.err")
grep -q "for 1 epochs, 1 steps" <<<"$fast" || fail "--fast_dev_run=true did not train one batch: $fast $(tail -3 "$work/fast.err")"
[[ ! -e lightning_logs ]] || fail "--fast_dev_run=true wrote $(ls -R lightning_logs)"
cd "$work/default" || exit 1

# Config files (LightningCLI's --config): a run saves its resolved configuration as config.yaml, and
# --config=<that file> trains the same parameters again in a new version folder; flags override the file;
# --print_config prints it and writes nothing.
mkdir -p "$work/config" && cd "$work/config" || exit 1
$fit --max_epochs=2 --num_train=512 --num_val=128 --hidden_sizes=16,8 --learning_rate=0.01 --enable_progress_bar=false \
  --summary_json=first.json >/dev/null 2>"$work/config.err" || fail "config: the first run failed: $(tail -3 "$work/config.err")"
saved=lightning_logs/version_0/config.yaml
grep -q '^  hidden_sizes: \[16, 8\]$' "$saved" || fail "config.yaml does not hold the run's --hidden_sizes: $(cat "$saved")"
$fit --config="$saved" --summary_json=again.json >/dev/null 2>"$work/config.err" ||
  fail "config: --config=$saved failed: $(tail -3 "$work/config.err")"
sha() { sed -n -E 's/.*"params_sha256": "([0-9a-f]+)".*/\1/p' "$1"; }
[[ -n "$(sha first.json)" && "$(sha first.json)" == "$(sha again.json)" ]] ||
  fail "--config=$saved trained other parameters: $(sha first.json) vs $(sha again.json)"
# Each logger takes a version: the first run's CSV and TensorBoard loggers took 0 and 1, the repeated run's 2 and 3.
[[ -s lightning_logs/version_2/config.yaml ]] || fail "the repeated run did not write version_2/config.yaml"
# The run's config.yaml is an output: it never replaces the file --config names (the same path, a symbolic or a hard
# link), nor an earlier run's without --save_config_overwrite; each is refused with exit 2 and nothing written.
ln -s "$saved" linked.yaml && ln "$saved" hard.yaml
before=$(sha256sum "$saved"; find lightning_logs | sort)
for given in "$saved" linked.yaml hard.yaml; do
  $fit --config="$given" --log_version=0 --max_epochs=1 >/dev/null 2>"$work/config.err"
  [[ $? -eq 2 ]] || fail "--config=$given --log_version=0 did not exit 2: $(tail -3 "$work/config.err")"
  grep -qF "it is the run folder's config.yaml" "$work/config.err" || fail "--config=$given: $(cat "$work/config.err")"
done
cp "$saved" mine.yaml
$fit --config=mine.yaml --log_version=0 --max_epochs=1 >/dev/null 2>"$work/config.err"
[[ $? -eq 2 ]] && grep -qF "config.yaml exists already" "$work/config.err" ||
  fail "an earlier run's config.yaml was not refused: $(cat "$work/config.err")"
[[ "$before" == "$(sha256sum "$saved"; find lightning_logs | sort)" ]] || fail "a refused run changed lightning_logs"
rm -f linked.yaml hard.yaml mine.yaml
printed=$($fit --config="$saved" --max_epochs=7 --print_config 2>&1)
grep -q '^  max_epochs: 7$' <<<"$printed" || fail "--max_epochs=7 did not override the config file: $printed"
grep -q '^    lr: 0.01$' <<<"$printed" || fail "--print_config lost the file's learning rate (optimizer.init_args.lr): $printed"
[[ ! -e lightning_logs/version_4 ]] || fail "--print_config started a run"
# A file as LightningCLI users write it: callbacks by class path, logger: false.
cat >lightning.yaml <<'YAML'
seed_everything: 3
trainer:
  max_epochs: 1
  logger: false
  enable_progress_bar: false
  callbacks:
  - class_path: lightning.pytorch.callbacks.ModelCheckpoint
    init_args: {monitor: val_acc, mode: max, filename: "best-{epoch}"}
data:
  num_train: 256
YAML
$fit --config=lightning.yaml --default_root_dir=from_yaml >/dev/null 2>"$work/config.err" ||
  fail "config: lightning.yaml failed: $(tail -3 "$work/config.err")"
[[ -s from_yaml/checkpoints/best-epoch=0.ckpt && ! -e from_yaml/lightning_logs ]] ||
  fail "lightning.yaml: wanted from_yaml/checkpoints/best-epoch=0.ckpt and no logs: $(ls -R from_yaml)"
printf 'trainer:\n  max_epoch: 3\n' >"$work/typo.yaml"
printf 'model:\n  max_epochs: 3\n' >"$work/misplaced.yaml"
printf 'trainer:\n  callbacks:\n  - class_path: StochasticWeightAveraging\n    init_args: {swa_epoch_start: 2}\n' \
  >"$work/swa.yaml"
printf 'trainer:\n  callbacks:\n  - class_path: lightning.pytorch.callbacks.EMAWeightAveraging\n    init_args: {decay: 2}\n' \
  >"$work/ema.yaml"
printf 'trainer: {max_epochs: ten}\n' >"$work/bad_value.yaml"
cd "$work/default" || exit 1

# Lightning's command line (lightning_cli.h): the subcommand, --SECTION.KEY, --optimizer, --seed_everything, and
# --ckpt_path=last on a fresh folder (a warning, then training from scratch, as Lightning does). The same run with
# fit's own flags trains the same parameters.
before_lightning_cli=$PWD
mkdir -p "$work/lightning_cli" && cd "$work/lightning_cli" || exit 1
$fit fit --trainer.max_epochs=2 --data.num_train=256 --data.num_val=64 --model.hidden_sizes=16 \
  --optimizer=torch.optim.SGD --optimizer.lr=0.05 --seed_everything=5 --trainer.enable_progress_bar=false \
  --ckpt_path=last --trainer.default_root_dir=lcli --summary_json=lcli.json >/dev/null 2>"$work/lcli.err" ||
  fail "LightningCLI's spellings: the run failed: $(tail -3 "$work/lcli.err")"
grep -q "There is nothing to resume: training starts from scratch" "$work/lcli.err" ||
  fail "--ckpt_path=last on a fresh folder did not warn: $(cat "$work/lcli.err")"
$fit --mode=fit --max_epochs=2 --num_train=256 --num_val=64 --hidden_sizes=16 --optimizer=sgd --learning_rate=0.05 \
  --seed=5 --enable_progress_bar=false --default_root_dir=own --summary_json=own.json >/dev/null 2>"$work/own.err" ||
  fail "fit's own flags: the run failed: $(tail -3 "$work/own.err")"
[[ -n "$(sha lcli.json)" && "$(sha lcli.json)" == "$(sha own.json)" ]] ||
  fail "LightningCLI's spellings trained other parameters than fit's flags: $(sha lcli.json) vs $(sha own.json)"
grep -q '"epochs": 2' lcli.json || fail "--trainer.max_epochs=2 did not train 2 epochs: $(cat lcli.json)"
cd "$before_lightning_cli" || exit 1
# Precisions the cpu accelerator declares: each trains, says so, and --summary_json records it. A short run (3
# epochs) is far above chance (0.25) in every one of them.
summary=${TEST_TMPDIR:-/tmp}/fit_summary.$$.json
run_precision() {  # run_precision <flag value> <precision used> <stderr fragment or ''>
  local flag=$1 used=$2 fragment=$3 out err acc
  out=$($fit --precision="$flag" --max_epochs=3 --enable_progress_bar=false --enable_checkpointing=false \
    --summary_json="$summary" 2>"$work/precision.err")
  local code=$?
  err=$(cat "$work/precision.err")
  if [[ $code -ne 0 ]]; then fail "--precision=$flag exited $code: $err"; return; fi
  grep -qF "Trained on cpu (single_device, $used) for 3 epochs" <<<"$out" || fail "--precision=$flag: no '$used' in: $out"
  grep -qF "\"precision\": \"$used\"" "$summary" || fail "--precision=$flag: summary: $(cat "$summary")"
  acc=$(awk '$1 == "val_acc" {print $2}' <<<"$out")
  awk -v a="${acc:-0}" 'BEGIN {exit !(a > 0.75)}' || fail "--precision=$flag: val_acc '${acc}' is not above 0.75"
  if [[ -n $fragment ]]; then
    grep -qF -- "$fragment" <<<"$err" || fail "--precision=$flag: '$fragment' not on stderr: $err"
  else
    grep -q "historical reasons\|not supported on CPU" <<<"$err" && fail "--precision=$flag: unexpected warning: $err"
  fi
  rm -f "$summary"
}
run_precision 32-true 32-true ""
run_precision 64-true 64-true ""
run_precision 64 64-true ""  # Lightning maps "64" silently.
run_precision bf16-mixed bf16-mixed "Using bfloat16 Automatic Mixed Precision (AMP)"
run_precision bf16-true bf16-true ""
# Lightning's substitution on CPU, with its warning.
run_precision 16-mixed bf16-mixed "You passed \`Trainer(accelerator='cpu', precision='16-mixed')\` but AMP with fp16 is not supported on CPU. Using \`precision='bf16-mixed'\` instead."
run_precision bf16 bf16-mixed "'bf16' is supported for historical reasons but its usage is discouraged. Please set your precision to 'bf16-mixed' instead!"

# --version: exit 0; the LibTorch it was built against is the one it runs with, and the run summary says the same.
version=$($fit --version)
[[ $? -eq 0 ]] || fail "--version did not exit 0"
echo "$version"
built=$(sed -n 's/^LibTorch: built against \([0-9.]*\), running with .*/\1/p' <<<"$version")
running=$(sed -n 's/^LibTorch: built against [0-9.]*, running with \([0-9][^ ]*\)$/\1/p' <<<"$version")
[[ -n $built && ${running%%+*} == "$built" ]] || fail "--version: built '$built', running '$running': $version"
grep -q '^CUDA: ' <<<"$version" || fail "--version names no CUDA line: $version"
grep -q '^LibTorch: Kiln needs 2\.8 or newer (' <<<"$version" || fail "--version does not say which LibTorch Kiln needs: $version"
$fit --max_epochs=1 --enable_progress_bar=false --enable_checkpointing=false --summary_json="$summary" >/dev/null \
  2>"$work/version.err" || fail "the run for the summary's versions failed: $(cat "$work/version.err")"
grep -qF "\"libtorch_version\": \"$running\", \"libtorch_build_version\": \"$built\", \"libtorch_minimum_version\": \"2.8\"" "$summary" ||
  fail "summary's LibTorch versions are not '$running' and '$built': $(cat "$summary")"
rm -f "$summary"

# Tuning before training. --auto_scale_batch_size=power on the CPU (nothing runs out of memory) on the synthetic
# task: from Lightning's init_val=2 the size doubles after each trial and the search stops at the first size that
# covers the training set (the data module's batch size is what is tuned, not the hparams' copy of --batch_size), and
# fit trains with it (one epoch: ceil(rows / size) steps), in hparams.yaml too. tests/lightning:tuner_test compares
# the size with Lightning's own search.
mkdir -p "$work/tune" && cd "$work/tune" || exit 1
rows=300
want=2
while ((want < rows)); do want=$((want * 2)); done
scaled=$($fit --max_epochs=1 --num_train=$rows --num_val=64 --enable_progress_bar=false --auto_scale_batch_size=power \
  --default_root_dir=scale 2>"$work/scale.err")
[[ $? -eq 0 ]] || fail "--auto_scale_batch_size=power failed: $(tail -3 "$work/scale.err")"
grep -qF "auto_scale_batch_size (power): batch size $want in place of --batch_size=64" "$work/scale.err" ||
  fail "--auto_scale_batch_size=power did not find $want for $rows rows: $(grep auto_scale "$work/scale.err")"
grep -q "for 1 epochs, $(((rows + want - 1) / want)) steps" <<<"$scaled" ||
  fail "--auto_scale_batch_size=power: fit did not train with batch size $want: $scaled"
grep -q "^batch_size: $want\$" scale/lightning_logs/version_0/hparams.yaml ||
  fail "hparams.yaml does not hold the batch size found: $(cat scale/lightning_logs/version_0/hparams.yaml)"
# --auto_lr_find: lr_find.csv in the run folder, one row a step, the rates on Lightning's schedule (min_lr first,
# then min_lr x (max_lr / min_lr)^((k + 1) / num_training) for step k: a constant ratio between steps from the
# second on); fit trains with the suggested rate (one of the rows, past Lightning's 10 skipped points), in
# hparams.yaml too.
# (The range test's steps count against --max_epochs: 512 rows in batches of 8 give it 64 steps in the one epoch.)
$fit --max_epochs=1 --num_train=512 --num_val=64 --batch_size=8 --enable_progress_bar=false --auto_lr_find \
  --lr_find_min_lr=1e-6 --lr_find_max_lr=1 --lr_find_num_training=40 --default_root_dir=lr >/dev/null 2>"$work/lr.err" ||
  fail "--auto_lr_find failed: $(tail -3 "$work/lr.err")"
curve=lr/lightning_logs/version_0/lr_find.csv
[[ "$(head -1 "$curve")" == "lr,loss" ]] || fail "$curve has no lr,loss header: $(head -2 "$curve")"
points=$(($(wc -l <"$curve") - 1))
((points > 10 && points <= 40)) || fail "$curve has $points rows, wanted 11 to 40"
awk -F, -v n=40 'NR == 2 { if ($1 != 1e-6) bad = "first rate " $1 " is not min_lr" }
  NR == 3 { r = 1e6 ^ (2 / n); if ($1 / prev < r * (1 - 1e-9) || $1 / prev > r * (1 + 1e-9)) bad = "second rate " $1 }
  NR > 3 { r = 1e6 ^ (1 / n); if ($1 / prev < r * (1 - 1e-9) || $1 / prev > r * (1 + 1e-9)) bad = "rate " $1 " at row " NR }
  NR > 1 { prev = $1 } END { if (bad != "") { print bad; exit 1 } }' "$curve" ||
  fail "$curve is not on lr_find's schedule: $(awk -F, 'NR > 1 && NR < 5' "$curve")"
line=$(grep "^auto_lr_find: learning rate " "$work/lr.err")
index=$(sed -n -E 's/.*\(point ([0-9]+) of ([0-9]+)\).*/\1/p' <<<"$line")
[[ -n "$index" ]] && ((index >= 10)) && grep -qF "of $points)" <<<"$line" ||
  fail "--auto_lr_find: no suggestion past the first 10 of $points points: '$line'"
suggested=$(awk -F, -v row=$((index + 2)) 'NR == row { print $1 }' "$curve")
hparam=$(sed -n 's/^learning_rate: //p' lr/lightning_logs/version_0/hparams.yaml)
awk -v a="$suggested" -v b="$hparam" 'BEGIN { exit !(a != "" && b != "" && a == b + 0) }' ||
  fail "--auto_lr_find: hparams.yaml's learning_rate '$hparam' is not lr_find.csv's point $index ('$suggested')"
# report.html draws lr_find.csv's curve: one vertex for each row with a finite loss, the suggestion marked.
report=lr/lightning_logs/version_0/report.html
finite=$(awk -F, 'NR > 1 && $2 !~ /nan/' "$curve" | wc -l)
grep -q '<section id="lr-find">' "$report" || fail "report.html has no lr_find section"
grep -q "data-series=\"loss\" data-points=\"$finite\"" <<<"$(sed -n '/<section id="lr-find">/,/<\/section>/p' "$report")" ||
  fail "report.html's lr_find curve does not have lr_find.csv's $finite points"
marked=$(sed -n -E 's/.*class="x-mark" data-x="([^"]+)".*/\1/p' "$report")
awk -v a="$suggested" -v b="$marked" 'BEGIN { exit !(a != "" && b != "" && a == b + 0) }' ||
  fail "report.html marks '$marked', not the suggestion '$suggested'"
! grep -q 'id="lr-find"' scale/lightning_logs/version_0/report.html || fail "a run without --auto_lr_find drew lr_find"
cd "$work/default" || exit 1

# --help: exit 0, every flag of trainer/cli listed once, in groups.
help=$($fit --help)
[[ $? -eq 0 ]] || fail "--help did not exit 0"
flags_defined=$( (sed -n 's/^ABSL_FLAG([^,]*, *\([a-z_0-9]*\),.*/\1/p' "$TEST_SRCDIR"/*/trainer/cli/*_flags.cc
  sed -n 's/^KILN_TRAINER_OPTION([a-z]*, *[^,]*, *\([a-z_0-9]*\),.*/\1/p' "$TEST_SRCDIR"/*/trainer/trainer_options.inc) |
  sort)
[[ $(wc -l <<<"$flags_defined") -gt 50 ]] || fail "found only $(wc -l <<<"$flags_defined") flag definitions"
for flag in $flags_defined; do
  [[ $(grep -c -- "^  --$flag=" <<<"$help") -eq 1 ]] || fail "--help does not list --$flag exactly once"
done
for group in "Hardware" "Training loop:" "Checkpoints and resuming:" "Model:" "Data:" "Logging and outputs:" "Mode:"; do
  grep -q "^$group" <<<"$help" || fail "--help has no '$group' group"
done

# Bad input: a fresh, empty folder per case; afterwards it must still be empty.
printf 'a,b,label\n1,2,x\n3,oops,y\n' >"$work/bad_cell.csv"
printf 'a,b\n1,0\n2,1\n' >"$work/two_columns.csv"
printf 'not a TorchScript archive' >"$work/garbage.pt"
case_number=0
expect_usage_error() {  # expect_usage_error <stderr fragment> <flags>...
  local fragment=$1
  shift
  case_number=$((case_number + 1))
  local dir="$work/case_$case_number"
  mkdir -p "$dir"
  local err code
  err=$(cd "$dir" && $fit --default_root_dir="$dir" "$@" 2>&1 >/dev/null)
  code=$?
  if [[ $code -ne 2 ]]; then fail "fit $* exited $code, wanted 2: $err"; return; fi
  [[ $(grep -c "^error: " <<<"$err") -eq 1 ]] || fail "fit $*: not exactly one 'error: ' line in: $err"
  grep -qF -- "$fragment" <<<"$(grep "^error: " <<<"$err")" || fail "fit $*: '$fragment' not in: $err"
  [[ -z "$(ls -A "$dir")" ]] || fail "fit $* wrote $(ls -A "$dir")"
}
expect_usage_error "ThroughputMonitor(window_size=1)" --throughput_monitor --throughput_window_size=1
expect_usage_error "ThroughputMonitor(available_flops=-1)" --throughput_monitor --throughput_available_flops=-1
# Monitors that can never be read where they are read: refused before the run folder (issue #62's classes).
expect_usage_error "ModelCheckpoint(monitor='val_loss') monitors 'val_loss', which validation logs, but no validation runs in this fit: --limit_val_batches is 0: set it above 0" \
  --checkpoint_monitor=val_loss --limit_val_batches=0
expect_usage_error "EarlyStopping(monitor='val_loss') monitors 'val_loss', which validation logs, but no validation runs in this fit: --check_val_every_n_epoch is 3, beyond max_epochs=2" \
  --early_stopping_monitor=val_loss --check_val_every_n_epoch=3 --max_epochs=2
expect_usage_error "ModelCheckpoint(monitor='val_loss') reads 'val_loss', which validation logs, every 1 optimizer step(s) from step 1" \
  --checkpoint_monitor=val_loss --every_n_train_steps=1
expect_usage_error "the learning-rate scheduler's monitor 'val_loss' (interval='step') reads 'val_loss'" \
  --lr_scheduler=plateau --lr_scheduler_interval=step
# A schedule whose milestone the run never trains past (issue #62: milestones against max_epochs and max_steps).
expect_usage_error "StepLR(step_size=5), stepped every 1 epoch (interval='epoch'), changes the rate after 5 epoch(s), but this fit trains 2 epoch(s) (max_epochs=2)" \
  --lr_scheduler=step --step_size=5 --max_epochs=2
expect_usage_error "SequentialLR(milestones[0]=6), stepped every 1 optimizer step (interval='step'), changes the rate after 6 optimizer step(s), but this fit trains 4 optimizer step(s) (max_steps=4)" \
  --lr_scheduler=cosine --lr_scheduler_interval=step --warmup_iters=6 --T_max=10 --max_steps=4
# The command line.
expect_usage_error "unknown flag --max_epoch; did you mean --max_epochs?" --max_epoch=3
expect_usage_error "unknown flag --frobnicate (see --help)" --frobnicate
expect_usage_error "--max_epochs='ten' is not valid; pass an integer" --max_epochs=ten
expect_usage_error "--learning_rate='fast' is not valid; pass a number" --learning_rate=fast
expect_usage_error "--shuffle='maybe' is not valid; pass true or false" --shuffle=maybe
expect_usage_error "--max_epochs needs a value" --max_epochs
expect_usage_error "unexpected argument 'extra'" extra
# Hardware (resolved by the connector).
expect_usage_error "unknown accelerator 'tpu'; registered: cpu" --accelerator=tpu
expect_usage_error "invalid devices value 'x'" --devices=x
expect_usage_error "invalid strategy name: \`strategy='nope'\`" --strategy=nope
expect_usage_error "precision 'fp8' is not supported" --precision=fp8
expect_usage_error "num_nodes=0 is not valid; pass an int >= 1" --num_nodes=0
# The loop.
expect_usage_error "--max_epochs='-2' is not valid; pass an int >= -1 (-1: no limit)" --max_epochs=-2
expect_usage_error "--min_epochs='-1' is not valid; pass an int >= 0" --min_epochs=-1
expect_usage_error "--max_steps='-5' is not valid; pass an int >= -1" --max_steps=-5
expect_usage_error "--max_time='soon' is not valid; pass a positive time as DD:HH:MM:SS" --max_time=soon
expect_usage_error "--max_time='00:00:00:00' is not valid" --max_time=00:00:00:00
expect_usage_error "--max_time='9223372036854775807:00:00:00' is not valid" --max_time=9223372036854775807:00:00:00
expect_usage_error "--max_time='inf' is not valid" --max_time=inf
expect_usage_error "--limit_train_batches='lots' is not valid" --limit_train_batches=lots
expect_usage_error "--limit_val_batches='1.5' is not valid; pass an int number of batches >= 0" --limit_val_batches=1.5
expect_usage_error "--limit_predict_batches='-1' is not valid" --limit_predict_batches=-1
expect_usage_error "--overfit_batches='some' is not valid" --overfit_batches=some
expect_usage_error "--val_check_interval='0' is not valid" --val_check_interval=0
expect_usage_error "--check_val_every_n_epoch='0' is not valid; pass an int >= 1" --check_val_every_n_epoch=0
expect_usage_error "--num_sanity_val_steps='-2' is not valid; pass an int >= -1" --num_sanity_val_steps=-2
expect_usage_error "--accumulate_grad_batches='0' is not valid; pass an int >= 1" --accumulate_grad_batches=0
expect_usage_error "--gradient_clip_val='-1' is not valid; pass a finite value > 0" --gradient_clip_val=-1
expect_usage_error "--gradient_clip_val='inf' is not valid; pass a finite value > 0" --gradient_clip_val=inf
expect_usage_error "--gradient_clip_algorithm='max' is not valid; pass norm or value" --gradient_clip_algorithm=max
expect_usage_error "--fast_dev_run='-1' is not valid" --fast_dev_run=-1
expect_usage_error "--fast_dev_run='yes' is not valid; pass true, false or an int N >= 0" --fast_dev_run=yes
expect_usage_error "--checkpoint_mode='avg' is not valid; pass min or max" --checkpoint_mode=avg
expect_usage_error "--save_top_k='-2' is not valid; pass an int >= -1 (-1: all, 0: none)" --save_top_k=-2
expect_usage_error "--patience='-1' is not valid; pass an int >= 0" --early_stopping_monitor=val_loss --patience=-1
expect_usage_error "--early_stopping_mode='up' is not valid; pass min or max" --early_stopping_monitor=val_loss \
  --early_stopping_mode=up
# StochasticWeightAveraging and EMAWeightAveraging (tests/cli/weight_averaging_test.sh runs them).
expect_usage_error "--swa_lrs='-0.01' is not valid; pass one learning rate > 0" --swa_lrs=-0.01
expect_usage_error "--swa_lrs='0.01,0.02' is not valid; pass one learning rate > 0 (fit's optimizer has one parameter group)" \
  --swa_lrs=0.01,0.02
expect_usage_error "--swa_epoch_start='1.5' is not valid; pass an int >= 1 (the epoch SWA starts at, counted from 1) or a fraction of --max_epochs in [0.0, 1.0]" \
  --swa_lrs=0.01 --swa_epoch_start=1.5
expect_usage_error "--swa_epoch_start='0' is not valid; pass an int >= 1" --swa_lrs=0.01 --swa_epoch_start=0
expect_usage_error "--annealing_strategy='cosine' is not valid; pass cos or linear" --swa_lrs=0.01 \
  --annealing_strategy=cosine
expect_usage_error "--annealing_epochs='-1' is not valid; pass an int >= 0" --swa_lrs=0.01 --annealing_epochs=-1
expect_usage_error "--annealing_epochs='5' is not valid; it tunes StochasticWeightAveraging, which is off: add it with --swa_lrs" \
  --annealing_epochs=5
expect_usage_error "--ema_decay='1.5' is not valid; pass a value in [0, 1]" --ema_weight_averaging --ema_decay=1.5
expect_usage_error "--ema_decay='-0.1' is not valid; pass a value in [0, 1]" --ema_weight_averaging --ema_decay=-0.1
expect_usage_error "--ema_update_every_n_steps='0' is not valid; pass an int >= 1" --ema_weight_averaging \
  --ema_update_every_n_steps=0
expect_usage_error "--ema_decay='0.9' is not valid; it tunes EMAWeightAveraging, which is off: add it with --ema_weight_averaging" \
  --ema_decay=0.9
expect_usage_error "StochasticWeightAveraging does not average a sharded model (--strategy=fsdp)" --swa_lrs=0.01 \
  --strategy=fsdp --devices=2
expect_usage_error "--config=$work/swa.yaml: trainer.callbacks[StochasticWeightAveraging].init_args: StochasticWeightAveraging needs swa_lrs" \
  --config="$work/swa.yaml"
expect_usage_error "--ema_decay='2' is not valid; pass a value in [0, 1]" --config="$work/ema.yaml"
expect_usage_error "--seed='-1' is not valid; pass an int >= 0" --seed=-1
expect_usage_error "--log_every_n_steps='-1' is not valid" --log_every_n_steps=-1
expect_usage_error "\`val_check_interval\` (1000) must be less than or equal to the number of the training batches" \
  --val_check_interval=1000
# Checkpoints.
expect_usage_error "--default_root_dir='' is not valid" --default_root_dir=
expect_usage_error "checkpoint $work/none.ckpt does not exist" --ckpt_path="$work/none.ckpt"
expect_usage_error "--every_n_train_steps='-1' is not valid" --every_n_train_steps=-1
# The model.
expect_usage_error "--model='resnet' is not valid; pass mlp, cnn, or the path of a TorchScript module" --model=resnet
expect_usage_error "no TorchScript file $work/none.pt" --model="$work/none.pt"
expect_usage_error "$work/garbage.pt is not a TorchScript module" --model="$work/garbage.pt"
expect_usage_error "--hidden_sizes='64,-1' is not valid" --hidden_sizes=64,-1
expect_usage_error "--hidden_sizes='67108865' is not valid; pass positive layer widths separated by commas, e.g. 64,64 (each at most 67108864)" \
  --hidden_sizes=67108865
# Accepted widths whose parameters cannot be allocated (160 GB): an error, not an abort. Under ASan, the allocator
# must return the failure rather than report it.
ASAN_OPTIONS=${ASAN_OPTIONS:-}:allocator_may_return_null=1 expect_usage_error \
  "--hidden_sizes=200000,200000: cannot build the mlp model" --hidden_sizes=200000,200000
expect_usage_error "--channels='' is not valid" --model=cnn --channels=
expect_usage_error "--kernel_size='4' is not valid; pass an odd int >= 1" --model=cnn --kernel_size=4
expect_usage_error "--input_shape='1,8' is not valid; pass three positive sizes C,H,W" --input_shape=1,8
expect_usage_error "--input_shape='1,3,3' is not valid; it holds 9 values per example, but the data has 16" \
  --input_shape=1,3,3
expect_usage_error "the data has 10 features, which is not a square image" --model=cnn --num_features=10
expect_usage_error "--optimizer='lbfgs' is not valid; pass adam, adamw or sgd (or Adam, AdamW, SGD)" --optimizer=lbfgs
expect_usage_error "--learning_rate='0' is not valid; pass a value > 0 within float32's range" --learning_rate=0
expect_usage_error "--learning_rate='inf' is not valid; pass a value > 0 within float32's range" --learning_rate=inf
expect_usage_error "--learning_rate='1e+300' is not valid; pass a value > 0 within float32's range" --learning_rate=1e300
# The data.
expect_usage_error "--data='imagenet' is not valid; pass synthetic, digits, or the path of a CSV file" --data=imagenet
expect_usage_error "--data='$work/none.csv' is not valid; no such file" --data="$work/none.csv"
expect_usage_error "$work/bad_cell.csv:3: column 2 ('b'): 'oops' is not a number" --data="$work/bad_cell.csv"
expect_usage_error "label column 'price' is not in the header of $work/two_columns.csv (a, b)" \
  --data="$work/two_columns.csv" --label_column=price
expect_usage_error "--label_column='' is not valid" --label_column=
expect_usage_error "apt-get install python3-sklearn" --data=digits --digits_path="$work/none.csv.gz"
expect_usage_error "--task='clustering' is not valid; pass classification or regression" --task=clustering
expect_usage_error "--data=synthetic is a classification task" --task=regression
expect_usage_error "--val_fraction='1' is not valid; pass a fraction in [0.0, 1.0)" --val_fraction=1
expect_usage_error "--batch_size='0' is not valid; pass an int >= 1" --batch_size=0
expect_usage_error "--num_workers='-1' is not valid" --num_workers=-1
expect_usage_error "--num_features='0' is not valid" --num_features=0
expect_usage_error "--num_classes='1' is not valid; pass an int >= 2" --num_classes=1
expect_usage_error "--num_train='0' is not valid" --num_train=0
expect_usage_error "--num_val='0' is not valid" --num_val=0
# Tuning.
expect_usage_error "--auto_scale_batch_size='huge' is not valid; accepted: none, power, binsearch" \
  --auto_scale_batch_size=huge
expect_usage_error "--lr_find_mode='cosine' is not valid; accepted: exponential, linear" --auto_lr_find \
  --lr_find_mode=cosine
expect_usage_error "--lr_find_min_lr='0' is not valid; pass a learning rate > 0" --auto_lr_find --lr_find_min_lr=0
expect_usage_error "--lr_find_num_training='0' is not valid; pass a number of steps >= 1" --auto_lr_find \
  --lr_find_num_training=0
# Outputs.
expect_usage_error "--logger='comet' is not valid; pass csv, tensorboard, mlflow, wandb, or several" --logger=comet
expect_usage_error "--logger='' is not valid" --logger=
expect_usage_error "--log_name='a/b' is not valid" --log_name=a/b
expect_usage_error "--log_version='-2' is not valid" --log_version=-2
# Modes.
expect_usage_error "--mode='train' is not valid; pass fit, validate, test or predict" --mode=train
expect_usage_error "--mode=predict needs --ckpt_path" --mode=predict
expect_usage_error "--mode=validate needs --ckpt_path" --mode=validate
expect_usage_error "--ckpt_path='best' is not valid; \"best\" only exists during fit" --mode=predict --ckpt_path=best
expect_usage_error "--predict_data='x.csv' is not valid; it is only read with --mode=predict" --predict_data=x.csv
# The default run's checkpoint says it trained on the synthetic task, which --predict_data cannot be.
expect_usage_error "the synthetic task has no file layout to predict on" --mode=predict \
  --ckpt_path="$work/default/lightning_logs/version_0/checkpoints/last.ckpt" --predict_data="$work/two_columns.csv"
expect_usage_error "ckpt_path=\"last\" found no complete checkpoint under" --mode=predict --ckpt_path=last
# Config files.
expect_usage_error "--config=$work/typo.yaml: unknown key trainer.max_epoch; did you mean trainer.max_epochs?" \
  --config="$work/typo.yaml"
expect_usage_error "unknown key model.max_epochs; max_epochs is written trainer.max_epochs" --config="$work/misplaced.yaml"
expect_usage_error "trainer.max_epochs: 'ten' is not valid; write an integer" --config="$work/bad_value.yaml"
expect_usage_error "--config=$work/none.yaml: No such file or directory" --config="$work/none.yaml"
echo "checked $case_number bad-input cases"

# --mode=validate from a checkpoint makes the data the run had, every data flag included (here the synthetic task's
# sizes, which are not fit's defaults): it validates to the val_loss the run logged for the same weights.
mkdir -p "$work/restored" && cd "$work/restored" || exit 1
$fit --max_epochs=1 --num_train=256 --num_val=64 --enable_progress_bar=false >/dev/null 2>&1 ||
  fail "restored: the run failed"
logged=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "val_loss") c = i; next } $c != "" { v = $c }
  END { print v }' lightning_logs/version_0/metrics.csv)
$fit --mode=validate --ckpt_path=last --enable_progress_bar=false --summary_json=validate.json >validate.out \
  2>validate.err || fail "restored: --mode=validate failed: $(tail -2 validate.err)"
grep -q -- "--num_train=256 --num_val=64" validate.err || fail "restored: the data sizes were not taken from the run"
validated=$(sed -n -E 's/.*"val_loss": ([0-9.e+-]+).*/\1/p' validate.json)
[[ -n "$logged" && "$validated" == "$logged" ]] ||
  fail "restored: --mode=validate gave val_loss '$validated', the run logged '$logged' for the same weights and rows"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "fit checks passed"
