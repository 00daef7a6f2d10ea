#!/usr/bin/env bash
# Tensor parallelism end to end: examples/real_models/tp_gpt (a user's own program: a small GPT written with
# kiln::ColumnParallelLinear, RowParallelLinear and ParallelSelfAttention) trained under model_parallel at
# tp = 2 x dp = 2 on 4 CPU processes (Gloo) and on 4 virtual NPUs (their own collective backend), and at tp = 4
# ("auto" on one node), against its single-device run with the same global batches and the same initial weights (each
# rank draws the whole weights from one seed and keeps its slices). Then the errors: a mesh whose product is not the
# world size (from the program, from fit and from a LightningCLI config), and model_parallel's options under another
# strategy. Full checkpoints: one saved at 2 x 2 resumes on one device and one saved on one device resumes at 2 x 2.
# Last, the same GPT under fsdp with each block a unit (#61 item 1: members the model calls itself), against ddp.
#
# The bound. The runs compute the same sums in different orders, and nothing else: a row-parallel layer adds tp
# partial dot products of length n / tp where one device computes one of length n; the column-parallel layers'
# backward all-reduce adds tp partial input gradients; the data-parallel average adds dp half-batch gradients where
# one device sums the batch at once. Any order of a float32 sum of n terms is within (n - 1) u sum|terms| of the exact
# one (u = 2^-24), so two orders differ by at most 2 (n - 1) u, 1.5e-5 of sum|terms| for the longest sum here
# (n = 4 dim = 128). A forward pass has 2 such reductions per block (attention's out, the MLP's down), 4 in all: to
# first order, with layer norm and softmax not amplifying (their Jacobians are bounded by 1 on these activations), the
# step-1 loss moves by at most 4 x 1.5e-5 = 6e-5 of its size. The gradients' rounding differs by the same relative
# amount, and SGD (lr 0.3, momentum 0.9) carries it into the parameters; over these 32 steps, whose loss falls by
# under 15%, the test allows 2e-4 of the loss at every step: about three times the one-step bound. Measured on this
# machine: at most 2 units in the last place (5e-7, 1.4e-7 of the loss). A layer whose collective is wrong moves the
# loss by 1e-2 and more within a few steps (checked by breaking one).
set -uo pipefail
run=$PWD/examples/real_models/tp_gpt
fit=$PWD/trainer/cli/fit
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
export VIRTUAL_NPU_DEVICES=4
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
train() {  # NAME ARGS...: trains, leaving NAME.rank<R>.txt (the global loss of every step)
  local name=$1
  shift
  timeout 300 "$run" "$name" epochs=4 "$@" 2>"$name.err" ||
    fail "$name ($*) failed: $(grep -v '^[IW][0-9]' "$name.err" | grep -v '^WARNING: Logging' | tail -3)"
}
within() {  # A B [STEPS]: B's losses are A's within the bound, step by step (STEPS of them, 32 by default)
  python3 - "$1.rank0.txt" "$2.rank0.txt" "${3:-32}" <<'PY' || fail "$2 is not within the bound of $1"
import sys
a = [float.fromhex(l) for l in open(sys.argv[1])]
b = [float.fromhex(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == int(sys.argv[3]), (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"  {sys.argv[2]}: {len(b)} steps, loss {b[0]:.4f} -> {b[-1]:.4f}, largest difference {worst:.2e} of the loss "
      f"(bound 2e-4)")
assert len(a) < 32 or a[-1] < a[0] - 0.1, f"the single-device run did not learn ({a[0]} -> {a[-1]}): the comparison would be weak"
assert worst <= 2e-4, f"differs by {worst:.2e} of the loss"
PY
}
ranks_agree() {  # NAME N
  for ((r = 1; r < $2; ++r)); do cmp -s "$1.rank0.txt" "$1.rank$r.txt" || fail "$1: rank $r's losses differ from rank 0's"; done
}
refused() {  # NAME EXPECTED_STATUS TEXT COMMAND...: the command fails with that status, saying TEXT
  local name=$1 expected=$2 text=$3
  shift 3
  timeout 120 "$@" >"$name.out" 2>"$name.err"
  local status=$?
  [[ $status == "$expected" ]] || fail "$name: exit status $status, expected $expected"
  grep -qF -- "$text" "$name.err" || fail "$name: no '$text' in: $(grep -v '^[IW][0-9]' "$name.err" | tail -3)"
  echo "  $name: exit $status: $(grep -F -- "$text" "$name.err" | head -1 | cut -c1-160)"
}

echo "== the GPT on one device, and under model_parallel"
train single strategy=single_device devices=1
train cpu_2x2 strategy=model_parallel devices=4 data_parallel_size=2 tensor_parallel_size=2
within single cpu_2x2
ranks_agree cpu_2x2 4
train npu_2x2 accelerator=virtual_npu strategy=model_parallel devices=4 data_parallel_size=2 tensor_parallel_size=2
within single npu_2x2
ranks_agree npu_2x2 4
grep -q "model_parallel: rank 0 at (0, 0) of a 2 x 2" npu_2x2.err || fail "npu_2x2 made no 2 x 2 mesh"
train cpu_auto strategy=model_parallel devices=4  # "auto": tp = 4 devices, dp = 1 node
within single cpu_auto
grep -q "of a 1 x 4 (data_parallel x tensor_parallel) mesh" cpu_auto.err || fail "auto did not make a 1 x 4 mesh"

echo "== full checkpoints: saved at 2 x 2, resumed on one device; saved on one device, resumed at 2 x 2"
# Each run resumes from the end of epoch 2 (step 16) and trains epochs 3 and 4: its 16 losses are the uninterrupted
# single-device run's last 16 within the same bound (the file holds the whole weights and momentum buffers, so a
# missing or misplaced slice, or momentum left out, shows at once).
train mp_save strategy=model_parallel devices=4 data_parallel_size=2 tensor_parallel_size=2 epochs=2 checkpointing=1 \
  root=mp_root
train single_save strategy=single_device epochs=2 checkpointing=1 root=single_root
for checkpoint in mp_root/checkpoints/epoch=1-step=16.ckpt single_root/checkpoints/epoch=1-step=16.ckpt; do
  [[ -f $checkpoint ]] || fail "no checkpoint $checkpoint"
done
train single_resume strategy=single_device ckpt=mp_root/checkpoints/epoch=1-step=16.ckpt
train mp_resume strategy=model_parallel devices=4 data_parallel_size=2 tensor_parallel_size=2 \
  ckpt=single_root/checkpoints/epoch=1-step=16.ckpt
ranks_agree mp_resume 4
tail -n 16 single.rank0.txt >single_last.rank0.txt
within single_last single_resume 16
within single_last mp_resume 16

echo "== errors"
refused program_mesh 1 "data_parallel_size=3 times tensor_parallel_size=2 is 6, but the run has 4 processes" \
  "$run" bad strategy=model_parallel devices=4 data_parallel_size=3 tensor_parallel_size=2
refused fit_mesh 2 "tensor_parallel_size=3 is 3, but the run has 4 processes" \
  "$fit" --strategy=model_parallel --devices=4 --tensor_parallel_size=3 --enable_checkpointing=false --max_epochs=1
refused fit_other_strategy 2 "tensor_parallel_size=2 is model_parallel's option, but the strategy is 'ddp'" \
  "$fit" --strategy=ddp --devices=2 --tensor_parallel_size=2 --max_epochs=1
refused fit_size_text 2 "pass \"auto\" or a positive number of devices" \
  "$fit" --strategy=model_parallel --devices=2 --tensor_parallel_size=two --max_epochs=1

echo "== a LightningCLI config names ModelParallelStrategy"
config() {  # FILE TP
  printf 'trainer:\n  devices: 4\n  max_epochs: 1\n  enable_checkpointing: false\n  strategy:\n    class_path: %s\n    init_args: {data_parallel_size: 2, tensor_parallel_size: %s}\n' \
    lightning.pytorch.strategies.ModelParallelStrategy "$2" >"$1"
}
config good.yaml 2
timeout 120 "$fit" --config=good.yaml >config_good.out 2>config_good.err || fail "the ModelParallelStrategy config failed"
grep -q "model_parallel: rank 0 at (0, 0) of a 2 x 2" config_good.err || fail "the config made no 2 x 2 mesh"
config bad.yaml 3
refused config_mesh 2 "data_parallel_size=2 times tensor_parallel_size=3 is 6" "$fit" --config=bad.yaml

echo "== the same GPT under fsdp, sharded by its blocks (members the model calls itself), against ddp"
# No wrapper anywhere: each TpGptBlock is a unit whose parameters are gathered when an operator reads them. ddp and
# fsdp at 2 ranks sum the same two halves of each gradient (in either order alike): the bound above holds with room.
train ddp_2 strategy=ddp devices=2
train fsdp_blocks_2 strategy=fsdp devices=2 auto_wrap_policy=TpGptBlock
within ddp_2 fsdp_blocks_2 16
ranks_agree fsdp_blocks_2 2
grep -q "fsdp: FULL_SHARD, 2 unit(s) and the root" fsdp_blocks_2.err ||
  fail "fsdp did not make the 2 blocks units: $(grep -o 'fsdp: FULL_SHARD.*parameters' fsdp_blocks_2.err | head -1)"

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS"
