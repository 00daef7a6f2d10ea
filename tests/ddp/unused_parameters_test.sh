#!/usr/bin/env bash
# A model with a parameter that takes no part in the step (a TorchScript module exported by Python, with a layer its
# forward never calls), trained by the real //trainer:fit on 2 CPU processes:
# - with ddp, PyTorch's reducer stops the run at the second step, and Kiln's error names the strategy that fixes it;
# - with ddp_find_unused_parameters_true (Lightning's name), it trains, and ends where one process with the combined
#   batch ends (to float rounding).
set -uo pipefail
fit=$PWD/trainer/cli/fit
compare=$PWD/tests/ddp/compare_checkpoints
python=/usr/bin/python3
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
last() { find "$1" -name last.ckpt | head -1; }
$python -c "import torch" 2>/dev/null || { echo "FAIL: python3-torch is not installed (tools/setup.sh installs it)"; exit 1; }

# torch.jit.script reads the class's source, so the script is a file.
cat >make_spare.py <<'PY'
import random
import torch

class Spare(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(6, 16)
        self.spare = torch.nn.Linear(16, 16)  # Never called: no gradient, ever.
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))

torch.manual_seed(0)
torch.jit.script(Spare()).save("spare.pt")
random.seed(11)
centres = [[random.gauss(0, 1.5) for _ in range(6)] for _ in range(4)]
with open("train.csv", "w") as f:
    f.write(",".join("x%d" % i for i in range(6)) + ",label\n")
    for _ in range(512):
        c = random.randrange(4)
        f.write(",".join("%.4f" % (m + random.gauss(0, 1)) for m in centres[c]) + ",%d\n" % c)
PY
$python make_spare.py || exit 1

common=(--data=train.csv --model=spare.pt --normalize=false --enable_progress_bar=false --max_epochs=2
  --num_sanity_val_steps=0 --log_every_n_steps=0 --save_last --seed=3 --val_fraction=0)

echo "== ddp: the unused parameter stops the run, and the error names the fix"
$fit "${common[@]}" --devices=2 --strategy=ddp --batch_size=32 --default_root_dir=plain >plain.out 2>plain.err
code=$?
[[ $code -ne 0 ]] || fail "ddp trained a model with an unused parameter without complaint"
grep -q "ddp_find_unused_parameters_true" plain.err || fail "the error does not name the fix: $(grep -m3 error plain.err)"

echo "== ddp_find_unused_parameters_true trains, as one process with the combined batch"
$fit "${common[@]}" --devices=2 --strategy=ddp_find_unused_parameters_true --batch_size=32 --default_root_dir=found \
  >found.out 2>found.err || fail "ddp_find_unused_parameters_true failed: $(tail -n 3 found.err)"
grep -q "^Trained on cpu (ddp_find_unused_parameters_true, 32-true)" found.out ||
  fail "no 'Trained on cpu (ddp_find_unused_parameters_true' in: $(cat found.out)"
$fit "${common[@]}" --devices=1 --batch_size=64 --default_root_dir=one >one.out 2>one.err ||
  fail "one process failed: $(tail -n 3 one.err)"
$compare "$(last found)" "$(last one)" 1e-5 || fail "2 processes with unused parameters differ from 1 with batch 64"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "unused-parameter checks passed"
