#!/usr/bin/env bash
# Tensor parallelism end to end: examples/real_models/tp_gpt (a user's own program: a small GPT written with
# kiln::ColumnParallelLinear, RowParallelLinear and ParallelSelfAttention) trained under model_parallel at
# tp = 2 x dp = 2 on 4 CPU processes (Gloo) and on 4 virtual NPUs (their own collective backend), and at tp = 4
# ("auto" on one node), against its single-device run with the same global batches and the same initial weights (each
# rank draws the whole weights from one seed and keeps its slices). Then the errors: a mesh whose product is not the
# world size (from the program, from fit and from a LightningCLI config), and model_parallel's options under another
# strategy. Sharded checkpoints (the default): saved at 2 x 2 without gathering, resumed at 1 x 4, 4 x 1, on virtual
# NPUs and on one device, read by PyTorch's DCP, and whole after a crash mid-write. Full checkpoints: one saved at
# 2 x 2 resumes on one device and one saved on one device resumes at 2 x 2.
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
kill_at=$PWD/tests/reliability/kill_at
check_dcp=$PWD/tests/fsdp/check_dcp.py
python=$PWD/../lightning_python/python  # PyTorch from PyPI (tools/setup.sh), to read sharded checkpoints with.
python_where=$PWD/../lightning_python/where.txt
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

echo "== sharded checkpoints (the default): saved at 2 x 2, each rank its slices; resumed at 1 x 4, at 4 x 1 and on one device"
# Each run resumes from the end of epoch 2 (step 16) and trains epochs 3 and 4: its 16 losses are the uninterrupted
# single-device run's last 16 within the same bound (the checkpoint holds the whole weights and momentum buffers in
# pieces, so a missing or misplaced slice, or momentum left out, shows at once). At 2 x 2 no slice is gathered: the
# column-parallel weights are written by rows, the row-parallel ones by columns, where they lie in the whole tensors.
train mp_save strategy=model_parallel devices=4 data_parallel_size=2 tensor_parallel_size=2 epochs=2 checkpointing=1 \
  root=mp_root
sharded=mp_root/checkpoints/epoch=1-step=16.ckpt
[[ -f $sharded/meta.pt && -f $sharded/.metadata ]] || fail "no sharded checkpoint $sharded: $(ls -R mp_root | head)"
for ((r = 0; r < 4; ++r)); do [[ -s $sharded/__${r}_0.distcp ]] || fail "rank $r wrote no pieces into $sharded"; done
tail -n 16 single.rank0.txt >single_last.rank0.txt
train single_resume strategy=single_device ckpt=$sharded
within single_last single_resume 16
train mp_resume_1x4 strategy=model_parallel devices=4 data_parallel_size=1 tensor_parallel_size=4 ckpt=$sharded
ranks_agree mp_resume_1x4 4
within single_last mp_resume_1x4 16
train mp_resume_4x1 strategy=model_parallel devices=4 data_parallel_size=4 tensor_parallel_size=1 ckpt=$sharded
within single_last mp_resume_4x1 16
train npu_resume_2x2 accelerator=virtual_npu strategy=model_parallel devices=4 data_parallel_size=2 \
  tensor_parallel_size=2 ckpt=$sharded
within single_last npu_resume_2x2 16

echo "== full checkpoints (save_distributed_checkpoint=0): saved at 2 x 2, resumed on one device; saved on one device, resumed at 2 x 2"
train mp_full_save strategy=model_parallel devices=4 data_parallel_size=2 tensor_parallel_size=2 epochs=2 \
  checkpointing=1 root=mp_full_root save_distributed_checkpoint=0
train single_save strategy=single_device epochs=2 checkpointing=1 root=single_root
full=mp_full_root/checkpoints/epoch=1-step=16.ckpt
for checkpoint in $full single_root/checkpoints/epoch=1-step=16.ckpt; do
  [[ -f $checkpoint ]] || fail "no checkpoint file $checkpoint"
done
train single_resume_full strategy=single_device ckpt=$full
train mp_resume strategy=model_parallel devices=4 data_parallel_size=2 tensor_parallel_size=2 \
  ckpt=single_root/checkpoints/epoch=1-step=16.ckpt
ranks_agree mp_resume 4
within single_last single_resume_full 16
within single_last mp_resume 16

echo "== PyTorch's torch.distributed.checkpoint reads the sharded checkpoint as the full one of the same run"
# Both runs are the same 2 x 2 run to step 16 (the same sums in the same order): the sharded folder's pieces, laid
# out in two dimensions, must make exactly the full file's tensors.
if "$python" -c "import torch.distributed.checkpoint" >dcp_import.err 2>&1; then
  "$python" "$check_dcp" "$sharded" "$full" >dcp.out 2>&1 ||
    fail "PyTorch's torch.distributed.checkpoint does not read it as the full checkpoint: $(grep -v Warn dcp.out | tail -4)"
  echo "  $(tail -1 dcp.out)"
  # Written from the slices, not gathered: a row-parallel weight's pieces start at column tp_rank x columns / 2.
  "$python" - "$sharded" >dcp_layout.out 2>&1 <<'PY' || fail "the pieces are not the slices: $(tail -3 dcp_layout.out)"
import sys
from torch.distributed.checkpoint import FileSystemReader
metadata = FileSystemReader(sys.argv[1]).read_metadata()
split = sorted(key for key, item in metadata.state_dict_metadata.items()
               if hasattr(item, "chunks") and any(len(c.offsets) == 2 and c.offsets[1] > 0 for c in item.chunks))
print(f"{len(split)} tensors in pieces along their second dimension, e.g. {split[:2]}")
assert any(key.startswith("model.") for key in split), "no model tensor was written in column slices"
PY
  echo "  $(tail -1 dcp_layout.out)"
else
  echo "  SKIPPED (this part only): no PyTorch at $(cat "$python_where") to read it with (tools/setup.sh installs it):" \
    "$(tail -1 dcp_import.err)"
fi

echo "== a crash while a sharded checkpoint is written leaves the previous one whole"
# The saves are asynchronous: the ranks write their pieces on the checkpoint writer's thread while training goes on.
# Every process is killed (SIGKILL to the launching one; its ranks die with it) just after the second save's
# temporary folder appears: the first checkpoint (step 8) must still be there, whole, and resume to the uninterrupted
# run's losses; no second one under its name; the resumed run removes the temporary folder.
"$kill_at" --watch=crash_root/checkpoints --during_write=2 --delay_us=300 -- \
  "$run" crash strategy=model_parallel devices=4 data_parallel_size=2 tensor_parallel_size=2 checkpointing=1 \
  root=crash_root >kill.out 2>crash.err
echo "  $(cat kill.out)"
grep -q "^killed_ms=.* in_write=1" kill.out || fail "the kill did not land inside the second write: $(cat kill.out)"
first=crash_root/checkpoints/epoch=0-step=8.ckpt
[[ -f $first/meta.pt ]] || fail "the previous checkpoint did not survive: $(ls crash_root/checkpoints)"
[[ -e crash_root/checkpoints/epoch=1-step=16.ckpt ]] && fail "a checkpoint under the second one's name after the crash"
train crash_resume strategy=model_parallel devices=4 data_parallel_size=2 tensor_parallel_size=2 ckpt=$first \
  checkpointing=1 root=crash_root
tail -n 24 single.rank0.txt >single_last24.rank0.txt
within single_last24 crash_resume 24
ls crash_root/checkpoints | grep -q "tmp-" && fail "the temporary folder of the killed write is still there"

echo "== errors"
refused program_mesh 1 "data_parallel_size=3 times tensor_parallel_size=2 is 6, but the run has 4 processes" \
  "$run" bad strategy=model_parallel devices=4 data_parallel_size=3 tensor_parallel_size=2
refused fit_mesh 2 "tensor_parallel_size=3 is 3, but the run has 4 processes" \
  "$fit" --strategy=model_parallel --devices=4 --tensor_parallel_size=3 --enable_checkpointing=false --max_epochs=1
refused fit_other_strategy 2 "tensor_parallel_size=2 is model_parallel's option, but the strategy is 'ddp'" \
  "$fit" --strategy=ddp --devices=2 --tensor_parallel_size=2 --max_epochs=1
refused fit_size_text 2 "pass \"auto\" or a positive number of devices" \
  "$fit" --strategy=model_parallel --devices=2 --tensor_parallel_size=two --max_epochs=1
refused fit_full_other_strategy 2 "save_distributed_checkpoint=false is model_parallel's option, but the strategy is 'ddp'" \
  "$fit" --strategy=ddp --devices=2 --save_distributed_checkpoint=false --max_epochs=1

echo "== a LightningCLI config names ModelParallelStrategy"
config() {  # FILE TP SAVE_DISTRIBUTED_CHECKPOINT
  printf 'trainer:\n  devices: 4\n  max_epochs: 1\n  default_root_dir: %s\n  strategy:\n    class_path: %s\n    init_args: {data_parallel_size: 2, tensor_parallel_size: %s, save_distributed_checkpoint: %s}\n' \
    "${1%.yaml}_root" lightning.pytorch.strategies.ModelParallelStrategy "$2" "$3" >"$1"
}
# Lightning's save_distributed_checkpoint, read from the config: true, a sharded folder; false, a full file.
for save in true false; do
  config good_$save.yaml 2 $save
  timeout 120 "$fit" --config=good_$save.yaml >config_$save.out 2>config_$save.err ||
    fail "the ModelParallelStrategy config (save_distributed_checkpoint: $save) failed: $(tail -2 config_$save.err)"
  grep -q "model_parallel: rank 0 at (0, 0) of a 2 x 2" config_$save.err || fail "the config made no 2 x 2 mesh"
done
saved=$(find good_true_root -name '*.ckpt' | head -1)
[[ -d $saved && -f $saved/meta.pt ]] || fail "save_distributed_checkpoint: true wrote no sharded folder ($saved)"
saved=$(find good_false_root -name '*.ckpt' | head -1)
[[ -f $saved ]] || fail "save_distributed_checkpoint: false wrote no checkpoint file ($saved)"
config bad.yaml 3 true
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
