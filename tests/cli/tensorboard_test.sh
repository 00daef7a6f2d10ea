#!/usr/bin/env bash
# The TensorBoard logger through the real //trainer:fit binary, read back by an independent reader: Google's
# protobuf runtime over TensorBoard's own message definitions (read_tensorboard.py, tensorboard_protos/).
set -uo pipefail
fit=$PWD/trainer/cli/fit
reader=$PWD/tests/cli/read_tensorboard.py
protos=$PWD/tests/cli/tensorboard_protos
python=/usr/bin/python3
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1

for need in "protoc --version" "$python -c 'import google.protobuf, crcmod'"; do
  if ! eval "$need" >/dev/null 2>&1; then
    echo "FAIL: '$need' failed; install protobuf-compiler, python3-protobuf and python3-crcmod (tools/setup.sh does)"
    exit 1
  fi
done

$fit --logger=csv,tensorboard --max_epochs=4 --log_every_n_steps=10 --enable_progress_bar=false \
  --default_root_dir=runs >fit.out 2>fit.err || { echo "FAIL: fit failed: $(tail -3 fit.err)"; exit 1; }
# Each logger has its own version folder, as Lightning's do: the CSV logger's (first) holds the checkpoints.
logs=runs/lightning_logs
ls "$logs"/version_0 "$logs"/version_1
[[ -f $logs/version_0/metrics.csv && -d $logs/version_0/checkpoints ]] ||
  { echo "FAIL: the CSV logger's version_0 has no metrics.csv or checkpoints"; exit 1; }
ls "$logs"/version_0/events.out.tfevents.* >/dev/null 2>&1 && { echo "FAIL: events in the CSV logger's folder"; exit 1; }
$python "$reader" "$protos" build "$logs/version_0" "$logs/version_1" || exit 1

# The second run takes the next two versions, in the order of --logger.
$fit --logger=tensorboard,csv --max_epochs=1 --enable_progress_bar=false --default_root_dir=runs >/dev/null 2>&1 ||
  { echo "FAIL: the second run failed"; exit 1; }
ls "$logs"/version_2/events.out.tfevents.* "$logs"/version_3/metrics.csv >/dev/null ||
  { echo "FAIL: the second run's TensorBoard and CSV loggers did not take version_2 and version_3"; exit 1; }
[[ -d $logs/version_2/checkpoints ]] || { echo "FAIL: the first logger's folder (version_2) has no checkpoints"; exit 1; }
$python "$reader" "$protos" build2 "$logs/version_3" "$logs/version_2" || exit 1

# A version named on the command line is both loggers' (as it is for Lightning's, given the same version).
$fit --max_epochs=1 --enable_progress_bar=false --default_root_dir=runs --log_version=7 >/dev/null 2>&1 ||
  { echo "FAIL: the run with --log_version=7 failed"; exit 1; }
ls "$logs"/version_7/events.out.tfevents.* "$logs"/version_7/metrics.csv >/dev/null ||
  { echo "FAIL: --log_version=7 did not put both loggers in version_7"; exit 1; }
echo "TensorBoard checks passed"
