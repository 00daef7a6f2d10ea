#!/usr/bin/env bash
# Kiln's checkpoints from Python's side, with Debian's python3-torch (1.13) and the real //trainer:fit:
#   1. torch.load reads a Kiln checkpoint as a dictionary with Lightning's keys; its state_dict goes into an
#      equivalent torch.nn module and its optimizer state into torch.optim.Adam;
#   2. a checkpoint saved by PyTorch from Python (torch.save of the module's and the optimizer's own state_dict(),
#      in that layout) resumes in Kiln, to exactly the parameters Kiln reaches from its own checkpoint;
#   3. a checkpoint Lightning 2.2.5 wrote (testdata/, made by testdata/make_lightning_checkpoint.py) resumes in Kiln.
# With KILN_LIGHTNING_PYTHON set to a Python that has Lightning, also: LightningModule.load_from_checkpoint accepts
# a Kiln checkpoint, and that Python's torch.load reads it with weights_only=True (without it that part says it did
# not run, and why: Lightning needs a PyTorch newer than Debian's, a 5 GB download that CI does not make).
set -uo pipefail
compare=$PWD/tests/ddp/compare_checkpoints
helper=$PWD/tests/cli/python_checkpoint.py
lightning_ckpt=$PWD/tests/cli/testdata/lightning-2.2.5.ckpt
source "$PWD/tests/cli/python_torch.sh"
common=(--hidden_sizes=16,16 --batch_size=32 --enable_progress_bar=false --seed=3)
last() { find "$1" -name last.ckpt | sort | tail -1; }

"$fit" "${common[@]}" --max_epochs=2 --default_root_dir=a >a.log 2>&1 || { cat a.log; fail "the first fit failed"; }
kiln_ckpt=$(last a)
[[ -n "$kiln_ckpt" ]] || { echo "FAIL: no last.ckpt"; exit 1; }

# 1. Python reads it.
$python "$helper" check "$kiln_ckpt" || fail "Python could not load Kiln's checkpoint into torch.nn and torch.optim"

# 2. A checkpoint PyTorch wrote, resumed by Kiln; and Kiln's own, resumed the same way.
$python "$helper" resave "$kiln_ckpt" python.ckpt || fail "Python could not save a checkpoint"
"$fit" "${common[@]}" --max_epochs=4 --default_root_dir=from_kiln --ckpt_path="$kiln_ckpt" >k.log 2>&1 ||
  { cat k.log; fail "resuming from Kiln's checkpoint failed"; }
"$fit" "${common[@]}" --max_epochs=4 --default_root_dir=from_python --ckpt_path=python.ckpt >p.log 2>&1 ||
  { cat p.log; fail "resuming from Python's checkpoint failed"; }
grep -q "was not written by Kiln" p.log || fail "the resume from Python's file did not say it was not Kiln's"
if [[ -n "$(last from_kiln)" && -n "$(last from_python)" ]]; then
  "$compare" "$(last from_kiln)" "$(last from_python)" 0 ||
    fail "resuming from Python's checkpoint did not reach the parameters resuming from Kiln's did"
fi

# 3. A checkpoint Lightning wrote at the end of its epoch 1, after 8 steps: Kiln resumes at epoch 2, so that
#    --max_epochs=3 trains one epoch of 4096 / 32 = 128 steps, 136 in all.
"$fit" "${common[@]}" --max_epochs=3 --default_root_dir=from_lightning --ckpt_path="$lightning_ckpt" \
  >l.log 2>&1 || { cat l.log; fail "resuming from Lightning's checkpoint failed"; }
grep -q "for 3 epochs, 136 steps" l.log ||
  { grep -i "trained\|error" l.log; fail "Kiln did not resume Lightning's checkpoint at epoch 2, step 8"; }

# Optional: Lightning's load_from_checkpoint on Kiln's checkpoint.
if [[ -n "${KILN_LIGHTNING_PYTHON:-}" ]]; then
  "$KILN_LIGHTNING_PYTHON" - "$kiln_ckpt" <<'PY' || fail "LightningModule.load_from_checkpoint refused Kiln's checkpoint"
import sys
import lightning.pytorch as pl
import torch
class Mlp(pl.LightningModule):
    def __init__(self, **hparams):
        super().__init__()
        self.received = hparams
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                                       torch.nn.ReLU(), torch.nn.Linear(16, 4))
model = Mlp.load_from_checkpoint(sys.argv[1])
print("load_from_checkpoint: OK,", sum(p.numel() for p in model.parameters()), "parameters; hyper-parameters",
      model.received)
# PyTorch 2.6 and later load with weights_only=True unless told otherwise: the file must need nothing else.
keys = torch.load(sys.argv[1], weights_only=True).keys()
print("torch %s, torch.load(weights_only=True): OK, %d keys" % (torch.__version__, len(keys)))
PY
else
  echo "NOT RUN: LightningModule.load_from_checkpoint (set KILN_LIGHTNING_PYTHON to a Python with lightning 2.x)"
fi

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS"
