#!/usr/bin/env bash
# Progress as people see it, through the real //trainer:fit binary: a bar redrawn in place when standard error is a
# terminal (run under `script`, which gives the program a pseudo-terminal), glog lines when it is not, nothing with
# --enable_progress_bar=false; and the model summary at the start.
set -uo pipefail
fit=$PWD/trainer/fit
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
command -v script >/dev/null || { echo "FAIL: no 'script' (util-linux) to give fit a terminal"; exit 1; }

# 12800 examples in batches of 64: 200 batches per epoch.
args="--max_epochs=2 --num_train=12800 --default_root_dir=$work/tty"
script -qec "$fit $args" /dev/null >tty.raw 2>&1 || fail "fit under a terminal failed: $(tail -3 tty.raw)"
tr '\r' '\n' <tty.raw | sed 's/\x1b\[K//g' >tty.txt
bar='^Epoch 1/1 \[[#.]{20}\] [0-9]+/200 \[[0-9]{2}:[0-9]{2}<[0-9]{2}:[0-9]{2}, [0-9.]+ it/s\] step [0-9]+ train_loss='
grep -Eq "$bar" tty.txt || fail "no progress bar like '$bar' in: $(grep Epoch tty.txt | head -3)"
grep -Eq '^Epoch 1/1 \[#{20}\] 200/200 .* step 400 ' tty.txt || fail "the bar did not reach 200/200 at step 400"
grep -Eq '^Epoch 0 done in [0-9.]+s:.* val_acc=[0-9.]+ ' tty.txt || fail "no end-of-epoch line with val_acc"
grep -q '^0 | net  | Sequential | 5.5 K' tty.txt || fail "no model summary row"
grep -q 'Total estimated model params size (MB)' tty.txt || fail "no model size"

# Not a terminal: glog lines every --log_every_n_steps steps, no bar.
$fit --max_epochs=2 --num_train=12800 --log_every_n_steps=100 --default_root_dir="$work/pipe" >/dev/null 2>pipe.txt ||
  fail "fit without a terminal failed"
[[ $(grep -Ec 'progress.cc:[0-9]+\] epoch [01] step (100|200|300|400) train_loss=' pipe.txt) -eq 4 ]] ||
  fail "expected 4 progress lines at steps 100..400: $(grep progress.cc pipe.txt)"
grep -q 'Epoch 0/1 \[' pipe.txt && fail "a bar was drawn although standard error is not a terminal"

# Off.
script -qec "$fit $args --enable_progress_bar=false --default_root_dir=$work/off" /dev/null >off.raw 2>&1 ||
  fail "fit with --enable_progress_bar=false failed"
grep -q -e 'Epoch 0/1 \[' -e 'progress.cc' off.raw && fail "progress shown with --enable_progress_bar=false"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "progress checks passed"
