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
run=runs/lightning_logs/version_0
ls "$run"
$python "$reader" "$protos" build "$run" || exit 1

# The second run takes the next version folder, and both loggers share it.
$fit --logger=tensorboard,csv --max_epochs=1 --enable_progress_bar=false --default_root_dir=runs >/dev/null 2>&1 ||
  { echo "FAIL: the second run failed"; exit 1; }
ls runs/lightning_logs/version_1/events.out.tfevents.* runs/lightning_logs/version_1/metrics.csv >/dev/null ||
  { echo "FAIL: the second run's loggers did not share version_1"; exit 1; }
$python "$reader" "$protos" build2 runs/lightning_logs/version_1 || exit 1
echo "TensorBoard checks passed"
