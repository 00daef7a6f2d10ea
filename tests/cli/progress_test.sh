#!/usr/bin/env bash
# Progress as people see it, through the real //trainer:fit binary: a bar redrawn in place when standard error is a
# terminal (run under `script`, which gives the program a pseudo-terminal, of a width the test sets), fitted to that
# width, with bars of their own for validation and the sanity check; glog lines when it is not; nothing with
# --enable_progress_bar=false; glog's INFO lines off the terminal unless --verbose; and the model summary.
set -uo pipefail
fit=$PWD/trainer/cli/fit
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
command -v script >/dev/null || { echo "FAIL: no 'script' (util-linux) to give fit a terminal"; exit 1; }

# 12800 examples in batches of 64: 200 batches per epoch.
args="--max_epochs=2 --num_train=12800 --default_root_dir=$work/tty"
# A wide terminal (200 columns) first: the whole bar and every metric fit.
script -qec "stty cols 200 rows 50; $fit $args" /dev/null >tty.raw 2>&1 ||
  fail "fit under a terminal failed: $(tail -3 tty.raw)"
tr '\r' '\n' <tty.raw | sed 's/\x1b\[K//g' >tty.txt
# The metrics carry the names the logs give them (train_loss is logged on step and epoch: train_loss_step).
bar='^Epoch 1/1 \[[#.]{20}\] [0-9]+/200 \[[0-9]{2}:[0-9]{2}<[0-9]{2}:[0-9]{2}, [0-9.]+ it/s\] step [0-9]+ .*train_loss_step='
grep -Eq "$bar" tty.txt || fail "no progress bar like '$bar' in: $(grep Epoch tty.txt | head -3)"
grep -Eq '^Sanity Checking \[#+\] 2/2 ' tty.txt || fail "no sanity-check bar: $(grep -i sanity tty.txt | head -2)"
grep -Eq '^Validation \[[#.]+\] [0-9]+/16 ' tty.txt || fail "no validation bar: $(grep -i valid tty.txt | head -2)"
grep -q 'connector.cc' tty.txt && fail "glog INFO lines reached the terminal: $(grep connector.cc tty.txt | head -1)"

# A narrow one (60 columns): no line is wider than 59, so nothing wraps; the bar is still there.
script -qec "stty cols 60 rows 50; $fit $args --default_root_dir=$work/narrow" /dev/null >narrow.raw 2>&1 ||
  fail "fit under a narrow terminal failed: $(tail -3 narrow.raw)"
tr '\r' '\n' <narrow.raw | sed 's/\x1b\[K//g' >narrow.txt
widest=$(grep -E '^(Epoch [0-9]+/|Validation|Sanity)' narrow.txt | awk '{ if (length($0) > w) w = length($0) } END { print w + 0 }')
[[ "$widest" -gt 0 && "$widest" -le 59 ]] || fail "a bar line is $widest columns wide on a 60-column terminal"
grep -Eq '^Epoch 1/1 \[[#.]+\] 200/200 ' narrow.txt || fail "no bar on the narrow terminal: $(grep Epoch narrow.txt | head -2)"

# --verbose brings the INFO lines back.
script -qec "stty cols 200 rows 50; $fit $args --verbose --max_epochs=1 --default_root_dir=$work/verbose" /dev/null \
  >verbose.raw 2>&1 || fail "fit --verbose failed"
grep -q 'connector.cc' verbose.raw || fail "--verbose showed no INFO line"
grep -Eq '^Epoch 1/1 \[#{20}\] 200/200 .* step 400 ' tty.txt || fail "the bar did not reach 200/200 at step 400"
grep -Eq '^Epoch 0 done in [0-9.]+s:.* val_acc=[0-9.]+ ' tty.txt || fail "no end-of-epoch line with val_acc"
grep -q '^0 | net  | Sequential | 5.5 K' tty.txt || fail "no model summary row"
grep -q 'Total estimated model params size (MB)' tty.txt || fail "no model size"

# Not a terminal: glog lines every --log_every_n_steps steps, no bar.
$fit --max_epochs=2 --num_train=12800 --log_every_n_steps=100 --default_root_dir="$work/pipe" >/dev/null 2>pipe.txt ||
  fail "fit without a terminal failed"
[[ $(grep -Ec 'progress.cc:[0-9]+\] epoch [01] step (100|200|300|400) train_loss_' pipe.txt) -eq 4 ]] ||
  fail "expected 4 progress lines at steps 100..400: $(grep progress.cc pipe.txt)"
grep -q 'Epoch 0/1 \[' pipe.txt && fail "a bar was drawn although standard error is not a terminal"

# A stream of unknown length (--streaming): batches counted and a rate, without a bar, a total or a time left.
/usr/bin/python3 -c '
import random
random.seed(2)
with open("stream.csv", "w") as f:
    f.write("a,b,label\n")
    for _ in range(6400):
        k = random.randrange(2)
        f.write(f"{random.gauss(k, 1):.3f},{random.gauss(-k, 1):.3f},{k}\n")
' || fail "could not write stream.csv"
script -qec "stty cols 200 rows 50; $fit --data=stream.csv --streaming --max_epochs=2 --default_root_dir=$work/stream" \
  /dev/null >stream.raw 2>&1 || fail "fit --streaming under a terminal failed: $(tail -3 stream.raw)"
tr '\r' '\n' <stream.raw | sed 's/\x1b\[K//g' >stream.txt
grep -Eq '^Epoch [01]/1: [0-9]+it \[[0-9]{2}:[0-9]{2}, [0-9.]+it/s\] step [0-9]+ ' stream.txt ||
  fail "no stream progress line like 'Epoch 1/1: 100it [00:01, 95.2it/s] step 200': $(grep Epoch stream.txt | tail -2)"
# Its end says how many batches the epoch had (6400 rows in batches of 64), whenever the bar was last drawn.
grep -Eq '^Epoch 1 done in [0-9.]+s \(100 batches\):' stream.txt ||
  fail "the stream's end-of-epoch line does not say its 100 batches: $(grep 'done in' stream.txt | tail -1)"

# Off.
script -qec "$fit $args --enable_progress_bar=false --default_root_dir=$work/off" /dev/null >off.raw 2>&1 ||
  fail "fit with --enable_progress_bar=false failed"
grep -q -e 'Epoch 0/1 \[' -e 'progress.cc' off.raw && fail "progress shown with --enable_progress_bar=false"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "progress checks passed"
