#!/usr/bin/env bash
# StochasticWeightAveraging and EMAWeightAveraging against the real Lightning 2.6 (tools/setup.sh): the same module,
# initial weights, batches, optimizer and schedule in Kiln (tests/ddp/weight_averaging.cc, a user's program) and in
# Lightning (weight_averaging.py), and the final parameters and buffers compared.
#
# The tolerance is zero: both sides run LibTorch 2.11's CPU kernels on the same machine, on the same float32 values
# in the same order (Kiln's SWA update is PyTorch's avg + (w - avg) / (n + 1) with n an int64 tensor, its EMA
# decay * avg + (1 - decay) * w, SWALR's arithmetic is done in double as Python does it), so every value must be the
# same bits. The premise is checked first: without a callback the two runs must already end bit for bit; if they do
# not (another torch build, another kernel), the test says so instead of blaming the averaging.
set -uo pipefail
kiln=$PWD/tests/ddp/weight_averaging
script=$PWD/tests/lightning/weight_averaging.py
source "$PWD/tests/lightning/common.sh"

# Lines "name v v ..." (hexadecimal floats) of two files: the largest difference, and the names that differ.
compare() {
  "$python" - "$1" "$2" <<'PY'
import sys
def read(path):
    return {f[0]: f[1:] for f in (line.split() for line in open(path)) if f}
a, b = read(sys.argv[1]), read(sys.argv[2])
bad = []
for name in a:
    if name in ("global_step",):
        continue
    if name not in b or len(a[name]) != len(b[name]):
        bad.append(f"{name}: missing or of another size"); continue
    diff = max((abs(float.fromhex(x) - float.fromhex(y)) for x, y in zip(a[name], b[name])), default=0.0)
    if diff > 0:
        bad.append(f"{name}: differs by up to {diff:.3g}")
print("\n".join(bad))
PY
}

for mode in none ema swa; do
  "$kiln" "$mode" "kiln_$mode.txt" 2>"kiln_$mode.err" || { tail -5 "kiln_$mode.err"; fail "Kiln's $mode run failed"; continue; }
  lightning "$script" "$mode" "lightning_$mode.txt" || { fail "Lightning's $mode run failed"; continue; }
  differences=$(compare "kiln_$mode.txt" "lightning_$mode.txt")
  if [[ -n $differences ]]; then
    echo "$differences" | head -12
    if [[ $mode == none ]]; then
      fail "without a callback Kiln and Lightning already end apart: the comparison's premise (the same kernels) fails"
    else
      fail "$mode: Kiln's final weights differ from Lightning's"
    fi
  fi
done
# What each side averaged: SWA 4 epochs (swa_epoch_start=0.5 of 6: epochs 3 to 6), EMA every one of 24 steps.
grep -qx "n_averaged 4" kiln_swa.txt || fail "Kiln's SWA averaged $(grep n_averaged kiln_swa.txt), not 4"
grep -qx "n_averaged 24" kiln_ema.txt || fail "Kiln's EMA averaged $(grep n_averaged kiln_ema.txt), not 24"
cmp -s <(grep n_averaged kiln_swa.txt) <(grep n_averaged lightning_swa.txt) || fail "SWA's n_averaged differs"
# The averaging changed something: the averaged runs end elsewhere than the plain one.
cmp -s <(grep ^last.weight kiln_none.txt) <(grep ^last.weight kiln_ema.txt) && fail "EMA left the weights as they were"
finish "the final weights of SWA (with its BatchNorm pass and SWALR) and of EMA equal Lightning's bit for bit"
