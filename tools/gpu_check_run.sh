#!/usr/bin/env bash
# Kiln's GPU check, run on a machine with an NVIDIA GPU from the pack tools/gpu_check.sh made (as its run.sh). It
# needs the pack, python3 with PyTorch 2.x built for CUDA (whose LibTorch and CUDA libraries the programs load) and
# nvidia-smi; no Bazel, no network. It prints one table, writes it to $OUT/gpu_check.txt (and every program's output
# to $OUT/gpu_check_logs.tgz) when OUT is set, and exits 1
# when any check fails. A check that cannot run on the machine fails too: here a skip is not a pass.
#
# What it checks, with the tolerances against the CPU (the synthetic task's validation metrics after 4 epochs; the
# GPU sums in another order, and mixed precision rounds its matrix products to 8 or 11 bits, so the two runs drift
# apart by about this much, while a broken device path is off by far more: chance accuracy is 0.25):
#   32-true     vs the CPU's 32-true:     |val_loss difference| <= 0.02, |val_acc difference| <= 0.02
#   bf16-mixed  vs the CPU's bf16-mixed:  |val_loss difference| <= 0.05, |val_acc difference| <= 0.03
#   16-mixed    vs the CPU's 32-true:     |val_loss difference| <= 0.05, |val_acc difference| <= 0.03 (the CPU has no
#               float16 matrix kernels worth comparing; the gradient scaler runs on the GPU alone)
# and exactly (params_sha256): a run stopped after 2 epochs and resumed from its GPU checkpoint to 4 equals a run
# of 4, in 32-true and in 16-mixed (whose scaler state the checkpoint carries); and DDP on NCCL with one process per
# visible GPU (world size 1 on a one-GPU machine equals the single-device run exactly); and DDP on Gloo with two
# processes sharing one GPU, against two CPU processes within the 32-true tolerances.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# tools/gpu_check.sh ships bin/ and lib/ compressed; unpacked here once.
if [[ ! -d "$here/bin" && -f "$here/payload.tar.gz" ]]; then tar -C "$here" -xzf "$here/payload.tar.gz" || exit 1; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python=${PYTHON:-python3}
start_all=$(date +%s)

rows=()
failed=0
row() {  # row <check> <PASS|FAIL> <detail> <seconds>
  rows+=("$(printf '| %-38s | %-4s | %6s s | %s' "$1" "$2" "$4" "$3")")
  [[ $2 == PASS ]] || failed=$((failed + 1))
  echo "gpu_check: $1: $2 ($3)" >&2
}

torch_lib=$($python -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>"$work/py")
if [[ -z "$torch_lib" ]]; then
  echo "gpu_check: $python cannot import torch: $(cat "$work/py")" >&2
  exit 1
fi
torch_version=$($python -c 'import torch; print(torch.__version__, torch.version.cuda)')
site=$(dirname "$(dirname "$torch_lib")")
nvidia_libs=$(ls -d "$site"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$here/lib:$torch_lib:$nvidia_libs${LD_LIBRARY_PATH:-}"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
fit=$here/bin/fit

# Runs a test binary; passes only when every test ran and passed (a skip means the GPU was not usable).
gtest() {  # gtest <check> <binary> [args...]
  local check=$1 binary=$2 t0 status
  shift 2
  t0=$(date +%s)
  timeout 300 "$here/bin/$binary" "$@" >"$work/$binary.log" 2>&1
  status=$?
  local passed skipped
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$work/$binary.log" | tail -n 1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$work/$binary.log" | tail -n 1)
  if [[ $status -eq 0 && -n $passed && -z $skipped ]]; then
    row "$check" PASS "$passed tests passed" $(($(date +%s) - t0))
  else
    row "$check" FAIL "exit $status, ${skipped:-0} skipped: $(grep -m 3 -E 'Failure|SKIPPED|error' "$work/$binary.log" |
      tr '\n' ' ' | cut -c1-300)" $(($(date +%s) - t0))
  fi
}

# One fit run; its summary goes to $work/<name>.json. Returns fit's status.
fit_run() {  # fit_run <name> <folder> [flags...]
  local name=$1 folder=$2
  shift 2
  mkdir -p "$folder"
  (cd "$folder" && timeout 300 "$fit" --enable_progress_bar=false --enable_model_summary=false --report=false \
    --summary_json="$work/$name.json" "$@") >"$work/$name.out" 2>"$work/$name.err"
}

json() {  # json <name> <python expression over s, the summary>
  $python -c "import json, sys; s = json.load(open(sys.argv[1])); print($2)" "$work/$1.json"
}

# 1. The LibTorch the programs were built against is the one this machine's PyTorch has.
t0=$(date +%s)
version=$("$fit" --version 2>&1)
if [[ $? -eq 0 && "$version" != *error:* ]]; then
  row "LibTorch version" PASS "$(sed -n 's/^LibTorch: //p' <<<"$version" | head -n 1); python: $torch_version" $(($(date +%s) - t0))
else
  row "LibTorch version" FAIL "$version" $(($(date +%s) - t0))
fi

# 2. The conformance suite and the trainer's GPU tests (checkpoint resume, DeviceStatsMonitor).
gtest "CUDA conformance suite" cuda_conformance_test --accelerator=cuda --one_rank_per_device
gtest "GPU trainer tests (resume, device stats)" cuda_device_test

# 3. Statistics from NVML and the caching allocator, as `accelerators --stats` shows them.
t0=$(date +%s)
"$here/bin/accelerators" --stats >"$work/stats.txt" 2>&1
nvml=$(awk '$1 == "nvml_available" {print $2; exit}' "$work/stats.txt")
allocator=$(awk '$1 == "allocator_available" {print $2; exit}' "$work/stats.txt")
total=$(awk '$1 == "memory_total_bytes" {print $2; exit}' "$work/stats.txt")
if [[ $nvml == 1 && $allocator == 1 && -n $total ]]; then
  row "NVML and caching-allocator statistics" PASS "memory_total_bytes $total" $(($(date +%s) - t0))
else
  row "NVML and caching-allocator statistics" FAIL "nvml_available=${nvml:-?} allocator_available=${allocator:-?}" \
    $(($(date +%s) - t0))
fi

# 4. fit on cuda in three precisions, each against the CPU.
epochs=4
t0=$(date +%s)
fit_run cpu_32 "$work/cpu_32" --accelerator=cpu --precision=32-true --max_epochs=$epochs || true
fit_run cpu_bf16 "$work/cpu_bf16" --accelerator=cpu --precision=bf16-mixed --max_epochs=$epochs || true
cpu_seconds=$(($(date +%s) - t0))
compare() {  # compare <gpu run> <cpu run> <precision> <loss tolerance> <acc tolerance>
  local gpu=$1 cpu=$2 precision=$3 t0 detail
  t0=$(date +%s)
  if ! fit_run "$gpu" "$work/$gpu" --accelerator=cuda --precision="$precision" --max_epochs=$epochs; then
    row "fit --accelerator=cuda --precision=$precision" FAIL "$(tail -n 1 "$work/$gpu.err")" $(($(date +%s) - t0))
    return
  fi
  if [[ ! -s "$work/$cpu.json" ]]; then
    row "fit --accelerator=cuda --precision=$precision" FAIL "the CPU run failed: $(tail -n 1 "$work/$cpu.err")" 0
    return
  fi
  detail=$($python - "$work/$gpu.json" "$work/$cpu.json" "$precision" "$4" "$5" <<'EOF'
import json, sys
gpu, cpu = (json.load(open(p)) for p in sys.argv[1:3])
precision, loss_tol, acc_tol = sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
g, c = gpu["final_metrics"], cpu["final_metrics"]
dl, da = abs(g["val_loss"] - c["val_loss"]), abs(g["val_acc"] - c["val_acc"])
ok = gpu["precision"] == precision and gpu["accelerator"] == "cuda" and dl <= loss_tol and da <= acc_tol
print("PASS" if ok else "FAIL", "val_loss %.4f vs cpu %.4f (|d| %.4f <= %g), val_acc %.4f vs %.4f (|d| %.4f <= %g), %s"
      % (g["val_loss"], c["val_loss"], dl, loss_tol, g["val_acc"], c["val_acc"], da, acc_tol, gpu["devices"]))
EOF
  )
  row "fit --accelerator=cuda --precision=$precision" "${detail%% *}" "${detail#* }" $(($(date +%s) - t0))
}
compare gpu_32 cpu_32 32-true 0.02 0.02
compare gpu_bf16 cpu_bf16 bf16-mixed 0.05 0.03
compare gpu_16 cpu_32 16-mixed 0.05 0.03

# 5. A checkpoint written on the GPU resumes exactly: 2 epochs, then resumed to 4, equals 4 straight. Also under
# fsdp_cpu_offload, which shards even one rank: its checkpoints go through host memory unit by unit
# (FlatParameter::GatherToHost), and training goes on after each save with the gradients' hooks put back.
resume() {  # resume <precision> [<tag> <flags...>]
  local precision=$1 tag=${2:-$1} t0 resumed straight
  shift 2 2>/dev/null || shift
  t0=$(date +%s)
  fit_run "r1_$tag" "$work/resume_$tag" --accelerator=cuda --precision="$precision" --max_epochs=2 "$@" &&
    fit_run "r2_$tag" "$work/resume_$tag" --accelerator=cuda --precision="$precision" --max_epochs=4 \
      --ckpt_path=last "$@" &&
    fit_run "r3_$tag" "$work/straight_$tag" --accelerator=cuda --precision="$precision" --max_epochs=4 "$@"
  if [[ $? -ne 0 ]]; then
    row "resume on the GPU ($tag)" FAIL "a run failed: $(tail -qn 1 "$work"/r*_"$tag".err | tr '\n' ' ')" \
      $(($(date +%s) - t0))
    return
  fi
  resumed=$(json "r2_$tag" 's["params_sha256"]')
  straight=$(json "r3_$tag" 's["params_sha256"]')
  if [[ -n $resumed && $resumed == "$straight" && -n $(json "r2_$tag" 's["resumed_from"]') ]]; then
    row "resume on the GPU ($tag)" PASS "params_sha256 ${resumed:0:16}... equal" $(($(date +%s) - t0))
  else
    row "resume on the GPU ($tag)" FAIL "resumed ${resumed:0:16} vs straight ${straight:0:16}" \
      $(($(date +%s) - t0))
  fi
}
resume 32-true
resume 16-mixed
resume 32-true fsdp_cpu_offload --strategy=fsdp_cpu_offload --devices=1

# 6. DDP on NCCL (LibTorch's ProcessGroupNCCL, the CUDA accelerator's collective backend), one process per visible
# GPU: it trains, on nccl, and with one GPU (world size 1) it ends with the single-device run's parameters exactly
# (the reducer divides by 1 and all-reduces over one rank). With several GPUs, against the CPU's metrics as above.
t0=$(date +%s)
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
if fit_run ddp_nccl "$work/ddp_nccl" --accelerator=cuda --devices=-1 --strategy=ddp --max_epochs=$epochs; then
  backend=$(json ddp_nccl 's["plan"]["process_group_backend"]')
  if [[ $gpus -eq 1 ]]; then
    ddp=$(json ddp_nccl 's["params_sha256"]')
    single=$(json gpu_32 's["params_sha256"]' 2>/dev/null)
    if [[ $backend == nccl && -n $ddp && $ddp == "$single" ]]; then
      row "DDP on NCCL, 1 GPU" PASS "process_group_backend nccl; params_sha256 ${ddp:0:16}... = single device" \
        $(($(date +%s) - t0))
    else
      row "DDP on NCCL, 1 GPU" FAIL "backend '$backend'; params ${ddp:0:16} vs single device ${single:0:16}" \
        $(($(date +%s) - t0))
    fi
  else
    acc=$(json ddp_nccl 's["final_metrics"]["val_acc"]')
    if [[ $backend == nccl ]] && awk -v a="$acc" 'BEGIN {exit !(a > 0.8)}'; then
      row "DDP on NCCL, $gpus GPUs" PASS "process_group_backend nccl; val_acc $acc" $(($(date +%s) - t0))
    else
      row "DDP on NCCL, $gpus GPUs" FAIL "backend '$backend', val_acc '$acc'" $(($(date +%s) - t0))
    fi
  fi
else
  row "DDP on NCCL" FAIL "$(tail -n 1 "$work/ddp_nccl.err")" $(($(date +%s) - t0))
fi

# 7. Two processes sharing GPU 0 over Gloo (--process_group_backend=gloo: NCCL refuses two ranks on one GPU), started
# as a launcher starts them (Lightning's variables: two nodes of one process each, both on cuda:0). They train on
# gloo, and end near 2 CPU processes on Gloo (the same shards and the same two-rank average; the GPU's kernels round
# differently), within the 32-true tolerances of step 4.
t0=$(date +%s)
fit_run ddp_cpu2 "$work/ddp_cpu2" --accelerator=cpu --devices=2 --strategy=ddp --max_epochs=$epochs || true
port=$((20000 + RANDOM % 20000))
shared=(--accelerator=cuda --devices=1 --num_nodes=2 --strategy=ddp --process_group_backend=gloo --max_epochs=$epochs
  --process_group_timeout=120)
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NODE_RANK=1 LOCAL_RANK=0 \
  fit_run shared_gpu_rank1 "$work/shared_gpu_rank1" "${shared[@]}" &
rank1=$!
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NODE_RANK=0 LOCAL_RANK=0 fit_run shared_gpu "$work/shared_gpu" "${shared[@]}"
status0=$?
wait $rank1
status1=$?
if [[ $status0 -ne 0 || $status1 -ne 0 ]]; then
  row "DDP on Gloo, 2 processes on one GPU" FAIL "exit $status0/$status1: $(tail -n 1 "$work/shared_gpu.err") /\
 $(tail -n 1 "$work/shared_gpu_rank1.err")" $(($(date +%s) - t0))
elif [[ ! -s "$work/ddp_cpu2.json" ]]; then
  row "DDP on Gloo, 2 processes on one GPU" FAIL "the 2-process CPU run failed: $(tail -n 1 "$work/ddp_cpu2.err")" \
    $(($(date +%s) - t0))
else
  detail=$($python - "$work/shared_gpu.json" "$work/ddp_cpu2.json" <<'EOF'
import json, sys
gpu, cpu = (json.load(open(p)) for p in sys.argv[1:3])
g, c = gpu["final_metrics"], cpu["final_metrics"]
dl, da = abs(g["val_loss"] - c["val_loss"]), abs(g["val_acc"] - c["val_acc"])
plan = gpu["plan"]
ok = plan["process_group_backend"] == "gloo" and plan["world_size"] == 2 and dl <= 0.02 and da <= 0.02
print("PASS" if ok else "FAIL", "backend %s, world size %s; val_loss %.4f vs 2 CPU processes %.4f (|d| %.4f <= 0.02), "
      "val_acc %.4f vs %.4f (|d| %.4f <= 0.02)" % (plan["process_group_backend"], plan["world_size"], g["val_loss"],
                                                   c["val_loss"], dl, g["val_acc"], c["val_acc"], da))
EOF
  )
  row "DDP on Gloo, 2 processes on one GPU" "${detail%% *}" "${detail#* }" $(($(date +%s) - t0))
fi

{
  echo "Kiln GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(cat "$here/COMMIT")"
  echo "GPU: ${gpu:-unknown (nvidia-smi gave nothing)}; PyTorch $torch_version; CPU reference runs ${cpu_seconds} s"
  echo
  printf '| %-38s | %-4s | %8s | %s\n' check result time detail
  printf '|%s|%s|%s|%s\n' "$(printf -- '-%.0s' {1..40})" "------" "----------" "--------"
  printf '%s\n' "${rows[@]}"
  echo
  echo "$((${#rows[@]} - failed)) passed, $failed failed in $(($(date +%s) - start_all)) s"
} | tee "$work/table.txt"
# Every program's output, in one file (what comes back from the GPU machine is a few files).
if [[ -n "${OUT:-}" ]]; then
  cp "$work/table.txt" "$OUT/gpu_check.txt"
  (cd "$work" && tar czf "$OUT/gpu_check_logs.tgz" ./*.err ./*.out ./*.log ./stats.txt 2>/dev/null)
fi
[[ $failed -eq 0 ]]
