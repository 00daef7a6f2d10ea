#!/usr/bin/env bash
# Data-parallel training on an out-of-tree device, through the real //trainer:fit: the virtual NPU brings its own
# collective backend ("vnccl", Kiln's StagedCollectives, hal/staged_collectives.h), and DDP runs on it.
# - 4 virtual NPU processes end with the parameters of 4 CPU processes, bit for bit (params_sha256): the same
#   reducer, the same sums, on another device;
# (What cannot work, Gloo named for the device's tensors or a backend the accelerator does not bring, is refused
# before training: //tests/third_party:instance_test; here, through fit's --process_group_backend, Gloo for the
# virtual NPU's tensors and the virtual NPU's backend for the CPU's.)
# - the local processes share the intra-op threads, unless OMP_NUM_THREADS is set;
# - a rank killed mid-training ends the others within --process_group_timeout plus a few seconds.
set -uo pipefail
fit=trainer/cli/fit
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
sha() { sed -n -E 's/.*"params_sha256": "([0-9a-f]{64})".*/\1/p' "$1" 2>/dev/null; }
export VIRTUAL_NPU_DEVICES=4
common=(--max_epochs=2 --num_train=512 --num_val=128 --enable_progress_bar=false --log_every_n_steps=0
  --enable_checkpointing=false --num_sanity_val_steps=0 --process_group_timeout=60)

echo "== 4 CPU processes, then 4 virtual NPU devices"
$fit "${common[@]}" --accelerator=cpu --devices=4 --strategy=ddp --default_root_dir="$tmp/cpu" \
  --summary_json="$tmp/cpu.json" >"$tmp/cpu.out" 2>"$tmp/cpu.err" || fail "4 CPU processes: $(tail -n 3 "$tmp/cpu.err")"
$fit "${common[@]}" --accelerator=virtual_npu --devices=4 --strategy=ddp --default_root_dir="$tmp/npu" \
  --summary_json="$tmp/npu.json" >"$tmp/npu.out" 2>"$tmp/npu.err" || fail "4 virtual NPUs: $(tail -n 3 "$tmp/npu.err")"
grep -q "^Trained on virtual_npu (ddp, 32-true)" "$tmp/npu.out" || fail "no 'Trained on virtual_npu (ddp' in: $(cat "$tmp/npu.out")"
grep -qF '"process_group_backend": "vnccl"' "$tmp/npu.json" || fail "the plan names no vnccl backend: $(cat "$tmp/npu.json")"
# The 4 local processes share the machine's intra-op threads (unless OMP_NUM_THREADS says otherwise): each takes
# its share, at least one, as the log says.
cores=$(nproc)
share=$((cores / 4 > 0 ? cores / 4 : 1))
grep -q "ddp: 4 local processes share $cores intra-op thread(s): $share each" "$tmp/cpu.err" ||
  fail "no 'ddp: 4 local processes share $cores intra-op thread(s): $share each' in: $(grep 'ddp:' "$tmp/cpu.err")"
cpu_sha=$(sha "$tmp/cpu.json")
npu_sha=$(sha "$tmp/npu.json")
[[ -n "$cpu_sha" && "$npu_sha" == "$cpu_sha" ]] || fail "4 virtual NPUs ended with $npu_sha, 4 CPU processes with $cpu_sha"

echo "== a backend that cannot carry the device, chosen with --process_group_backend, is refused before training"
$fit "${common[@]}" --accelerator=virtual_npu --devices=2 --strategy=ddp --process_group_backend=gloo \
  --default_root_dir="$tmp/gloo" >"$tmp/gloo.out" 2>"$tmp/gloo.err"
code=$?
[[ $code -ne 0 ]] || fail "--process_group_backend=gloo on virtual_npu exited 0"
grep -q "the collective backend 'gloo' cannot all-reduce virtual_npu:0 tensors" "$tmp/gloo.err" ||
  fail "no refusal naming gloo and the device in: $(tail -n 5 "$tmp/gloo.err")"
grep -q "^Trained on" "$tmp/gloo.out" && fail "it trained with gloo on virtual_npu"
# A user's OMP_NUM_THREADS is kept: no share is taken.
OMP_NUM_THREADS=1 $fit "${common[@]}" --accelerator=cpu --devices=2 --strategy=ddp --max_epochs=1 \
  --default_root_dir="$tmp/omp" >"$tmp/omp.out" 2>"$tmp/omp.err" || fail "2 CPU processes: $(tail -n 3 "$tmp/omp.err")"
grep -q "local processes share" "$tmp/omp.err" && fail "OMP_NUM_THREADS=1 was overridden: $(grep 'share' "$tmp/omp.err")"
$fit "${common[@]}" --accelerator=cpu --devices=2 --strategy=ddp --process_group_backend=vnccl \
  --default_root_dir="$tmp/vnccl" >"$tmp/vnccl.out" 2>"$tmp/vnccl.err" && fail "vnccl on cpu exited 0"
grep -q "process group backend 'vnccl' is not available for accelerator 'cpu'" "$tmp/vnccl.err" ||
  fail "no refusal of vnccl on cpu in: $(tail -n 5 "$tmp/vnccl.err")"

echo "== a killed rank ends the others within the timeout"
long=(--max_epochs=200 --num_train=32768 --enable_progress_bar=false --log_every_n_steps=0 --enable_checkpointing=false
  --num_sanity_val_steps=0)
start=$(date +%s)
$fit "${long[@]}" --accelerator=virtual_npu --devices=2 --strategy=ddp --process_group_timeout=10 \
  --default_root_dir="$tmp/kill" >"$tmp/kill.log" 2>&1 &
launcher=$!
child=""
for _ in $(seq 1 400); do
  child=$(pgrep -P $launcher | head -1)
  [[ -n "$child" ]] && grep -q "joined at" "$tmp/kill.log" && break
  sleep 0.05
done
[[ -n "$child" ]] || fail "no child process appeared"
sleep 1
kill -KILL "$child"
wait $launcher
code=$?
elapsed=$(($(date +%s) - start))
[[ $code -ne 0 ]] || fail "the launcher exited 0 after its rank 1 was killed"
[[ $elapsed -lt 25 ]] || fail "took ${elapsed}s to end after a rank was killed (timeout 10 s)"
pgrep -P $launcher >/dev/null && fail "a rank was left running"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "virtual_npu DDP checks passed (4 devices: parameters $npu_sha, as 4 CPU processes)"
