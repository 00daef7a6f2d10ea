#!/usr/bin/env bash
# Fully sharded data parallel against ddp and one device, with real processes (tests/fsdp/fsdp_run.cc and
# //trainer:fit; c10d over Gloo on loopback, and the virtual NPU's own collective backend).
#
# The bound. ddp and fsdp average the same per-rank gradients, each divided by N first; they differ only in the
# order the N parts are summed (Gloo's ring all-reduce against its reduce-scatter), and in where a fused optimizer's
# kernel meets a tensor's end (a shard's boundaries are not the parameters'). Each averaged gradient element then
# differs by at most 2 (N - 1) u G (u = 2^-24, G the largest |gradient| element, below 1 here). SGD with momentum m
# and learning rate lr carries a gradient's error into the parameters at most lr / (1 - m) times per step, so after
# T steps |p_ddp - p_fsdp| <= T lr / (1 - m) * 2 (N - 1) u, plus what the optimizer's own rounding adds: at N = 4,
# T = 8, lr = 0.1, m = 0.9, that is 2.9e-6. The test allows 1e-5 of (1 + |p|), three times that, for the feedback of
# the parameters into later gradients over so few steps. With 1 rank nothing is summed: fsdp equals one device bit
# for bit, and NO_SHARD equals ddp bit for bit at 2 ranks (two parts sum the same in either order).
set -uo pipefail
run=$PWD/tests/fsdp/fsdp_run
fit=$PWD/trainer/cli/fit
compare=$PWD/tests/ddp/compare_checkpoints
check_dcp=$PWD/tests/fsdp/check_dcp.py
python=$PWD/../lightning_python/python  # PyTorch from PyPI (tools/setup.sh), to read sharded checkpoints with.
python_where=$PWD/../lightning_python/where.txt
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
train() {  # NAME ARGS...: trains, leaving NAME.rank<R>.txt
  local name=$1
  shift
  timeout 300 "$run" "$name" "$@" 2>"$name.err" || { fail "$name ($*) failed: $(grep -v '^[I\[]' "$name.err" | tail -3)"; }
}
same() {  # A B TOLERANCE: fsdp's run B ends within TOLERANCE of A (0: bit for bit)
  local verdict
  if [[ $3 == 0 ]]; then
    # The files hold exact (hexadecimal) floats; compare skips the memory line.
    "$run" compare "$1.rank0.txt" "$2.rank0.txt" 0 >/dev/null && verdict="bit for bit" || fail "$2 is not bit for bit $1"
  else
    verdict=$("$run" compare "$1.rank0.txt" "$2.rank0.txt" "$3") || fail "$2 is not within $3 of $1: $verdict"
  fi
  echo "  $2 against $1: ${verdict:-}"
}
ranks_agree() {  # NAME N: every rank ends with the same whole model
  for ((r = 1; r < $2; ++r)); do cmp -s "$1.rank0.txt" "$1.rank$r.txt" || fail "$1: rank $r's model differs from rank 0's"; done
}

echo "== 1 rank: fsdp is the single-device run"
train single strategy=single_device devices=1
train fsdp1 devices=1
same single fsdp1 0
train single_adam strategy=single_device devices=1 optimizer=adam clip=0.5
train fsdp1_adam devices=1 optimizer=adam clip=0.5
same single_adam fsdp1_adam 0

echo "== 2 and 4 ranks on the CPU: every sharding strategy and policy against ddp"
for n in 2 4; do
  train ddp$n strategy=ddp devices=$n
  for variant in "full sharding=FULL_SHARD" "grad_op sharding=SHARD_GRAD_OP" "no_shard sharding=NO_SHARD" \
    "root policy=none" "size policy=size"; do
    set -- $variant
    train fsdp${n}_$1 devices=$n "${@:2}"
    ranks_agree fsdp${n}_$1 $n
    if [[ $1 == no_shard && $n == 2 ]]; then same ddp$n fsdp${n}_$1 0; else same ddp$n fsdp${n}_$1 1e-5; fi
  done
  # Adam, a gradient-accumulation window of 3 and clipping by norm (taken over every rank's shard).
  train ddp${n}_adam strategy=ddp devices=$n optimizer=adam accumulate=3 clip=0.5
  train fsdp${n}_adam devices=$n optimizer=adam accumulate=3 clip=0.5
  ranks_agree fsdp${n}_adam $n
  same ddp${n}_adam fsdp${n}_adam 1e-5
done
# 16-mixed on a fake accelerator that declares it (the scaler for real, autocast in bfloat16 as a stand-in): the
# scaler's inf check is summed over the shard group; a first scale of 1e37 makes the first steps overflow and be
# skipped, on every rank alike.
# The precision implies fsdp's mixed precision (Lightning's FSDPPrecision: 16-mixed float16, bf16-mixed bfloat16
# parameters and reductions); float32 given explicitly keeps the parameters float32, which is what ddp computes with.
fp32_mixed=(param_dtype=fp32 reduce_dtype=fp32 buffer_dtype=fp32)
train ddp2_16 strategy=ddp precision=16-mixed scale=1e37 optimizer=adam
train fsdp2_16 precision=16-mixed scale=1e37 optimizer=adam "${fp32_mixed[@]}"
same ddp2_16 fsdp2_16 1e-5
train ddp2_bf16 strategy=ddp precision=bf16-mixed
train fsdp2_bf16_fp32 precision=bf16-mixed "${fp32_mixed[@]}"
same ddp2_bf16 fsdp2_bf16_fp32 1e-5
echo "== fsdp mixed precision: implied by bf16-mixed, and alike under every sharding that keeps float32 shards"
# Each of these computes the same bfloat16 arithmetic on the same bits (the cast is per element; offloading and
# keeping the gathered parameters to the backward move memory, not values): bit for bit. NO_SHARD keeps nothing in
# float32 to gather from, so the implied mixed precision is left off there (a warning), and it is ddp's run.
train fsdp2_bf16 precision=bf16-mixed
train fsdp2_bf16_explicit precision=bf16-mixed param_dtype=bf16 reduce_dtype=bf16 buffer_dtype=bf16
same fsdp2_bf16 fsdp2_bf16_explicit 0
"$run" compare fsdp2_bf16.rank0.txt fsdp2_bf16_fp32.rank0.txt 0 >/dev/null &&
  fail "bf16-mixed's implied bfloat16 parameters ended where float32 parameters did"
train fsdp2_bf16_offload precision=bf16-mixed offload=1
same fsdp2_bf16 fsdp2_bf16_offload 0
train fsdp2_bf16_grad_op precision=bf16-mixed sharding=SHARD_GRAD_OP
same fsdp2_bf16 fsdp2_bf16_grad_op 0
train fsdp2_bf16_no_shard precision=bf16-mixed sharding=NO_SHARD
same ddp2_bf16 fsdp2_bf16_no_shard 0
grep -q "NO_SHARD cannot keep" fsdp2_bf16_no_shard.err || fail "NO_SHARD under bf16-mixed gave no warning"
# The comparison can fail: 2 and 4 ranks see different batches.
"$run" compare ddp2.rank0.txt ddp4.rank0.txt 1e-5 >/dev/null && fail "compare found 2 and 4 ranks of ddp alike"

echo "== any submodule as a unit: members the model calls itself (Block's in and out), units inside units"
# model=blocks: Linear(6, 12), then 3 Blocks whose forward calls its two Linear members itself, then the head. Under
# policy=linear every Linear is a unit (8), under nested each Block too, around its two (11); no wrapper is put
# anywhere: each unit's parameters are gathered when an operator reads them. The same bound as above against ddp.
members=(model=blocks width=12 depth=3)
train members_ddp2 strategy=ddp devices=2 "${members[@]}"
for variant in "linear 8" "nested 11"; do
  set -- $variant
  train members2_$1 devices=2 "${members[@]}" policy=$1
  ranks_agree members2_$1 2
  same members_ddp2 members2_$1 1e-5
  grep -q "fsdp: FULL_SHARD, $2 unit(s) and the root" members2_$1.err ||
    fail "policy=$1 did not make $2 units: $(grep -o 'fsdp: FULL_SHARD.*parameters' members2_$1.err | head -1)"
done
train members2_grad_op devices=2 "${members[@]}" policy=nested sharding=SHARD_GRAD_OP
same members_ddp2 members2_grad_op 1e-5

echo "== two nodes of 2 ranks (two programs on this machine, NODE_RANK 0 and 1): HYBRID_SHARD and FULL_SHARD"
# HYBRID_SHARD shards within each node and all-reduces across the nodes; the 4 ranks see the batches of 4 ranks on
# one node, so both end as ddp4 within the bound.
nodes() {  # NAME ARGS...: both nodes of a 2 x 2 run; their rank-0 files are NAME-node0.rank0.txt and -node1
  local name=$1 port
  shift
  local pids=()
  port=$("$run" free_port)
  for node in 0 1; do
    NODE_RANK=$node MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 300 "$run" "$name-node$node" devices=2 nodes=2 "$@" \
      >"$name-node$node.err" 2>&1 &
    pids+=($!)
  done
  for node in 0 1; do
    wait "${pids[$node]}" || fail "$name node $node: $(grep -v '^[I\[]' "$name-node$node.err" | tail -3)"
  done
}
nodes hybrid sharding=HYBRID_SHARD
nodes multi_full sharding=FULL_SHARD
for run_name in hybrid multi_full; do
  "$run" compare "$run_name-node0.rank0.txt" "$run_name-node1.rank1.txt" 0 >/dev/null ||
    fail "$run_name: rank 3 (node 1) ended with another model than rank 0"
  same ddp4 "$run_name-node0" 1e-5
done
grep -q "HYBRID_SHARD, 3 unit(s)" hybrid-node0.err || fail "no HYBRID_SHARD run in: $(grep 'fsdp:' hybrid-node0.err)"

echo "== 4 virtual NPUs, on the device's own collective backend"
export VIRTUAL_NPU_DEVICES=4
train npu_ddp4 accelerator=virtual_npu strategy=ddp devices=4
train npu_fsdp4 accelerator=virtual_npu devices=4
ranks_agree npu_fsdp4 4
same npu_ddp4 npu_fsdp4 1e-5
same ddp4 npu_fsdp4 1e-5

echo "== memory that shrinks with the ranks (the virtual NPU counts its allocator's peak)"
# 8 Linear layers of width 256 (463,107 parameters, 1.85 MB) and Adam, batches of 8: the parameters, gradients and
# optimizer state outweigh the activations. The bound at N ranks: ddp's peak / N plus two units whole, parameters and
# gradients: the unit whose backward runs, and the one travelling beside it (the next unit's parameters gathered
# ahead, backward_prefetch; the previous unit's gradients being reduced). A unit whole is 2 * 65,792 * 4 = 526,336
# bytes for Linear(256, 256).
# Without backward_prefetch no unit's parameters are gathered ahead: the peak is never higher (FSDPOptions). A
# checkpoint at each epoch's end (ModelCheckpoint) adds nothing to the peak either, nor does resuming from one: a save
# or a restore takes the state through host memory one unit at a time, and training goes on after it with the
# gradients' hooks in place (without them every unit's whole gradient would wait for the end of the backward pass).
unit_bytes=$((2 * 526336))
peak() { sed -n -E 's/^peak_bytes ([0-9]+)$/\1/p' "$1.rank0.txt"; }
# checkpoint_peaks N TYPE FSDP_PEAK: fsdp at N ranks saving a checkpoint (state_dict_type TYPE) each epoch, then a run
# resumed from it, in a folder of their own (TYPE<N>/, for its checkpoints/): both at or under FSDP_PEAK.
checkpoint_peaks() {
  local n=$1 type=$2 fsdp_peak=$3 saved which peak_bytes
  mkdir -p "$type$n" && cd "$type$n" || exit 1
  train mem_fsdp_save$n accelerator=virtual_npu devices=$n width=256 optimizer=adam batches=4 epochs=2 save=1 \
    state_dict_type=$type
  saved=$(ls -d "$PWD"/checkpoints/*.ckpt 2>/dev/null | head -1)
  train mem_fsdp_resume$n accelerator=virtual_npu devices=$n width=256 optimizer=adam batches=4 epochs=3 \
    state_dict_type=$type "resume=${saved:-none}"
  cd "$work" || exit 1
  # A full checkpoint is a file; a sharded one a folder of every rank's records.
  if [[ $type == sharded ]]; then
    [[ -d $saved ]] || fail "the run at $n ranks that saves sharded checkpoints saved no folder: '$saved'"
  else
    [[ -f $saved ]] || fail "the run at $n ranks that saves full checkpoints saved no file: '$saved'"
  fi
  for which in save resume; do  # (not $run: that is the program)
    peak_bytes=$(peak "$type$n/mem_fsdp_$which$n")
    echo "  $n      $type checkpoints, $which: ${peak_bytes:-none}"
    [[ -n $peak_bytes ]] && ((peak_bytes <= fsdp_peak)) ||
      fail "with $type checkpoints ($which) fsdp's peak at $n ranks is ${peak_bytes:-none} bytes, over its $fsdp_peak without"
  done
}
echo "  ranks  ddp peak (bytes)  fsdp peak (bytes)  without prefetch  bound"
for n in 1 2 4; do
  train mem_ddp$n accelerator=virtual_npu strategy=ddp devices=$n width=256 optimizer=adam batches=4 epochs=1
  train mem_fsdp$n accelerator=virtual_npu devices=$n width=256 optimizer=adam batches=4 epochs=1
  train mem_fsdp_noprefetch$n accelerator=virtual_npu devices=$n width=256 optimizer=adam batches=4 epochs=1 prefetch=0
  ddp_peak=$(peak mem_ddp$n)
  fsdp_peak=$(peak mem_fsdp$n)
  noprefetch_peak=$(peak mem_fsdp_noprefetch$n)
  bound=$(((ddp_peak + n - 1) / n + unit_bytes))
  echo "  $n      $ddp_peak           $fsdp_peak            $noprefetch_peak           $bound"
  [[ -n $ddp_peak && -n $fsdp_peak && -n $noprefetch_peak ]] ||
    { fail "no peak memory from the virtual NPU at $n ranks"; continue; }
  ((fsdp_peak <= bound)) || fail "fsdp's peak at $n ranks, $fsdp_peak bytes, is over ddp's / $n + two units, $bound"
  ((noprefetch_peak <= fsdp_peak)) ||
    fail "without backward_prefetch fsdp's peak at $n ranks, $noprefetch_peak bytes, is over its peak with it, $fsdp_peak"
  # The same bound where the units are members (Block's in and out, gathered on use, freed once the forward leaves
  # them): 4 Blocks of two Linear(256, 256).
  if ((n > 1)); then
    train mem_members_ddp$n accelerator=virtual_npu strategy=ddp devices=$n model=blocks width=256 depth=4 \
      optimizer=adam batches=4 epochs=1
    train mem_members$n accelerator=virtual_npu devices=$n model=blocks width=256 depth=4 optimizer=adam batches=4 \
      epochs=1 policy=linear
    members_bound=$((($(peak mem_members_ddp$n) + n - 1) / n + unit_bytes))
    echo "  $n      members as units: ddp $(peak mem_members_ddp$n), fsdp $(peak mem_members$n), bound $members_bound"
    [[ -n $(peak mem_members$n) ]] && (($(peak mem_members$n) <= members_bound)) ||
      fail "fsdp's peak at $n ranks with member units, $(peak mem_members$n) bytes, is over ddp's / $n + two units"
  fi
  checkpoint_peaks $n full "$fsdp_peak"
  # Sharded checkpoints (each rank writes its rows; the restore reads every rank's) need several ranks to differ.
  ((n > 1)) && checkpoint_peaks $n sharded "$fsdp_peak"
done

echo "== a model larger than one device: the device's memory limit under the model's parameters alone"
# Linear(6, 256), 63 Linear(256, 256) and the head (4,147,459 parameters, 16.59 MB in float32), SGD with momentum. One virtual NPU may hold
# 16 MB (VIRTUAL_NPU_MEMORY_LIMIT): less than the parameters, so a single device cannot even take the model. Each of 4
# ranks under fsdp holds a quarter of the parameters, their gradients and momentum (12.4 MB) and a unit or two whole,
# and trains; it ends where ddp on 4 unlimited devices ends, within the bound above. (The model is built in host
# memory and reaches the devices unit by unit, as shards.)
big=(accelerator=virtual_npu width=256 depth=64 batches=2 epochs=1)
export VIRTUAL_NPU_MEMORY_LIMIT=16000000
timeout 300 "$run" big_single "${big[@]}" strategy=single_device devices=1 >big_single.out 2>&1 &&
  fail "one virtual NPU with 16 MB trained a model of 16.59 MB"
grep -q "out of memory" big_single.out ||
  fail "the single device did not say it ran out of memory: $(grep -v '^[I\[]' big_single.out | tail -2)"
train big_fsdp4 "${big[@]}" devices=4
echo "  one device: $(grep -o -m1 'out of memory[^;]*' big_single.out | head -c 120)"
echo "  fsdp on 4: peak $(peak big_fsdp4) bytes of the 16000000 each may hold"
[[ -n $(peak big_fsdp4) ]] && (($(peak big_fsdp4) <= 16000000)) || fail "fsdp on 4 peaked at $(peak big_fsdp4) bytes"
# After the run the model is whole on every rank: in host memory, since it does not fit on the device.
grep -q "the trained model does not fit whole on virtual_npu:0, so its parameters stay in host memory" big_fsdp4.err ||
  fail "fsdp did not say where the trained model went: $(grep 'fsdp:' big_fsdp4.err | tail -2)"
unset VIRTUAL_NPU_MEMORY_LIMIT
train big_ddp4 "${big[@]}" strategy=ddp devices=4
same big_ddp4 big_fsdp4 1e-5

echo "== activation checkpointing: blocks (Linear, Tanh, Linear) recompute their activations in the backward pass"
# The same gradients (the recomputation runs the same kernels on the same values), so bit for bit the run without;
# less memory, with batches of 2048 whose activations outweigh the parameters.
ac=(accelerator=virtual_npu devices=2 model=blocks width=128 depth=4 policy=block batch=2048 batches=2 epochs=1)
train ac_off "${ac[@]}"
train ac_on "${ac[@]}" checkpoint=Block
train ac_ddp "${ac[@]}" strategy=ddp
same ac_off ac_on 0
same ac_ddp ac_on 1e-5
echo "  device peak: $(peak ac_off) bytes without, $(peak ac_on) with"
[[ -n $(peak ac_on) && $(peak ac_on) -lt $(peak ac_off) ]] ||
  fail "activation checkpointing did not lower the peak: $(peak ac_on) against $(peak ac_off)"

echo "== cpu_offload: the shards, their gradients and the optimizer's state in host memory"
# The device then holds only the units that compute (and the root): under a quarter of ddp's peak at every N.
for n in 1 2 4; do
  train mem_offload$n accelerator=virtual_npu devices=$n width=256 optimizer=adam batches=4 epochs=1 offload=1
  offload_peak=$(peak mem_offload$n)
  ddp_peak=$(peak mem_ddp$n)
  echo "  $n ranks: device peak $offload_peak bytes (ddp $ddp_peak)"
  [[ -n $offload_peak ]] && ((4 * offload_peak <= ddp_peak)) ||
    fail "with cpu_offload at $n ranks the device's peak, ${offload_peak:-none} bytes, is not under a quarter of ddp's"
done
train npu_offload2 accelerator=virtual_npu devices=2 offload=1
same ddp2 npu_offload2 1e-5
train npu_offload4_adam accelerator=virtual_npu devices=4 offload=1 optimizer=adam accumulate=3 clip=0.5
ranks_agree npu_offload4_adam 4
same ddp4_adam npu_offload4_adam 1e-5
unset VIRTUAL_NPU_DEVICES

echo "== fit --strategy=fsdp, with units (--auto_wrap_policy) and without"
common=(--accelerator=cpu --max_epochs=2 --enable_progress_bar=false --enable_checkpointing=false
  --hidden_sizes=30,31,33 --process_group_timeout=60)
timeout 300 "$fit" "${common[@]}" --devices=2 --strategy=ddp --summary_json=ddp.json >fit_ddp.out 2>&1 ||
  fail "fit ddp: $(tail -3 fit_ddp.out)"
timeout 300 "$fit" "${common[@]}" --devices=2 --strategy=fsdp --auto_wrap_policy=Linear --sharding_strategy=NO_SHARD \
  --summary_json=no_shard.json >fit_no_shard.out 2>&1 || fail "fit fsdp NO_SHARD: $(tail -3 fit_no_shard.out)"
timeout 300 "$fit" "${common[@]}" --devices=2 --strategy=fsdp --auto_wrap_policy=Linear \
  --summary_json=fsdp.json >fit_fsdp.out 2>&1 || fail "fit fsdp: $(tail -3 fit_fsdp.out)"
grep -q "^Trained on cpu (fsdp, 32-true)" fit_fsdp.out || fail "no 'Trained on cpu (fsdp, 32-true)' in: $(tail -3 fit_fsdp.out)"
# Linear(16, 30), (30, 31), (31, 33), (33, 4): 510 + 961 + 1056 + 136 = 2663 parameters; rank 0 keeps half of each
# unit padded to an even size: 255 + 481 + 528 + 68 = 1332.
grep -qF "fsdp: FULL_SHARD, 4 unit(s) and the root, 2663 parameters; rank 0 keeps 1332" fit_fsdp.out ||
  fail "fit fsdp did not make the 4 Linear units: $(grep 'fsdp:' fit_fsdp.out)"
sha() { sed -n -E 's/.*"params_sha256": "([0-9a-f]{64})".*/\1/p' "$1" 2>/dev/null; }
[[ -n $(sha ddp.json) && $(sha no_shard.json) == $(sha ddp.json) ]] || fail "fit fsdp NO_SHARD does not end as ddp"
val_loss() { sed -n -E 's/.*"val_loss": ([-0-9.e]+).*/\1/p' "$1"; }
awk -v a="$(val_loss ddp.json)" -v b="$(val_loss fsdp.json)" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d * d < 1e-10) }' ||
  fail "fit fsdp's val_loss $(val_loss fsdp.json) is not within 1e-5 of ddp's $(val_loss ddp.json)"

echo "== full checkpoints: written by rank 0 in ddp's layout, resumed on any number of ranks, exactly after SIGKILL"
last() { echo "$1/lightning_logs/version_0/checkpoints/last.ckpt"; }
ckpt=(--accelerator=cpu --enable_progress_bar=false --hidden_sizes=30,31,33 --process_group_timeout=60 --save_last)
sharded=(--strategy=fsdp --auto_wrap_policy=Linear)
timeout 300 "$fit" "${ckpt[@]}" --devices=2 --strategy=ddp --max_epochs=2 --default_root_dir=ck_ddp >ck_ddp.out 2>&1 ||
  fail "ddp with checkpoints: $(tail -3 ck_ddp.out)"
timeout 300 "$fit" "${ckpt[@]}" --devices=2 "${sharded[@]}" --max_epochs=2 --default_root_dir=ck_fsdp >ck_fsdp.out 2>&1 ||
  fail "fsdp with checkpoints: $(tail -3 ck_fsdp.out)"
# The model and every optimizer state tensor, under the same names, indices and keys (the layout torch.load and
# Lightning read in ddp's checkpoints: //tests/cli:python_checkpoint_test), within the bound above.
"$compare" "$(last ck_ddp)" "$(last ck_fsdp)" 1e-5 --with_optimizer >ck_compare.out 2>&1 ||
  fail "fsdp's checkpoint is not ddp's: $(cat ck_compare.out)"
echo "  fsdp's checkpoint against ddp's: $(cat ck_compare.out)"
timeout 300 "$fit" "${ckpt[@]}" --devices=2 "${sharded[@]}" --max_epochs=1 --default_root_dir=ck_e1 >ck_e1.out 2>&1 ||
  fail "fsdp, one epoch: $(tail -3 ck_e1.out)"
for spec in "fsdp2 --devices=2 ${sharded[*]}" "fsdp4 --devices=4 ${sharded[*]}" "ddp4 --devices=4 --strategy=ddp"; do
  set -- $spec
  timeout 300 "$fit" "${ckpt[@]}" "${@:2}" --max_epochs=2 --ckpt_path="$(last ck_e1)" --default_root_dir=ck_r_$1 \
    >ck_r_$1.out 2>&1 || fail "resuming fsdp's checkpoint with $1: $(tail -3 ck_r_$1.out)"
done
"$compare" "$(last ck_fsdp)" "$(last ck_r_fsdp2)" 0 --with_optimizer >/dev/null ||
  fail "fsdp resumed on 2 ranks does not end bit for bit as the uninterrupted run"
"$compare" "$(last ck_r_ddp4)" "$(last ck_r_fsdp4)" 1e-5 --with_optimizer >/dev/null ||
  fail "fsdp resumed on 4 ranks does not end as ddp resumed on 4 ranks"
timeout 300 "$fit" "${ckpt[@]}" --devices=2 "${sharded[@]}" --max_epochs=3 --ckpt_path="$(last ck_ddp)" \
  --default_root_dir=ck_from_ddp >ck_from_ddp.out 2>&1 || fail "fsdp resuming ddp's checkpoint: $(tail -3 ck_from_ddp.out)"
# fit --mode=validate under fsdp from fsdp's checkpoint: the same metrics as ddp's validation of ddp's checkpoint.
for strategy in ddp fsdp; do
  [[ $strategy == ddp ]] && from=ck_ddp || from=ck_fsdp
  timeout 300 "$fit" "${ckpt[@]}" --devices=2 --strategy=$strategy --mode=validate --ckpt_path="$(last $from)" \
    --summary_json=validate_$strategy.json >validate_$strategy.out 2>&1 ||
    fail "validating with $strategy: $(tail -3 validate_$strategy.out)"
done
awk -v a="$(val_loss validate_ddp.json)" -v b="$(val_loss validate_fsdp.json)" \
  'BEGIN { d = a - b; exit !(a != "" && b != "" && d * d < 1e-10) }' ||
  fail "fsdp validates to val_loss $(val_loss validate_fsdp.json), ddp to $(val_loss validate_ddp.json)"
# fit --mode=predict under fsdp (the units gathered per forward, the predictions gathered to rank 0): ddp's file.
for strategy in ddp fsdp; do
  timeout 300 "$fit" "${ckpt[@]}" --devices=2 --strategy=$strategy --mode=predict --ckpt_path="$(last ck_fsdp)" \
    --predictions="$work/predict_$strategy.csv" >predict_$strategy.out 2>&1 ||
    fail "predicting with $strategy: $(tail -3 predict_$strategy.out)"
done
[[ -s predict_fsdp.csv ]] && cmp -s predict_ddp.csv predict_fsdp.csv || fail "fsdp's predictions are not ddp's"
# SIGKILL part-way (after a checkpoint inside an epoch), then --ckpt_path=last: bit for bit the uninterrupted run.
long=("${ckpt[@]}" --devices=2 "${sharded[@]}" --max_epochs=3 --num_train=16384 --every_n_train_steps=40
  --log_every_n_steps=0)
timeout 300 "$fit" "${long[@]}" --default_root_dir=kill_a --summary_json=kill_a.json >kill_a.out 2>&1 ||
  fail "the uninterrupted long run: $(tail -3 kill_a.out)"
# kill_after_checkpoint NAME FILE ARGS...: runs fit ARGS in the background (output in NAME.out) and SIGKILLs it and its
# children once FILE exists (a checkpoint inside an epoch); fails when the run ends first.
kill_after_checkpoint() {
  local name=$1 file=$2 pid
  shift 2
  "$fit" "$@" >"$name.out" 2>&1 &
  pid=$!
  for _ in $(seq 1 3000); do
    [[ -e $file ]] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
  done
  sleep 0.3
  kill -0 $pid 2>/dev/null || fail "$name ended before it could be killed"
  pkill -KILL -P $pid
  kill -KILL $pid
  wait $pid 2>/dev/null
}
kill_after_checkpoint kill_b1 "$(last kill_b)" "${long[@]}" --default_root_dir=kill_b
timeout 300 "$fit" "${long[@]}" --default_root_dir=kill_b --ckpt_path=last --summary_json=kill_b.json >kill_b2.out 2>&1 ||
  fail "resuming after SIGKILL: $(tail -3 kill_b2.out)"
grep -q "Restored from checkpoint" kill_b2.out || fail "the killed run did not resume from a checkpoint"
[[ -n $(sha kill_a.json) && $(sha kill_b.json) == $(sha kill_a.json) ]] ||
  fail "resumed after SIGKILL, fsdp ends with $(sha kill_b.json), not the uninterrupted $(sha kill_a.json)"

echo "== sharded checkpoints: every rank writes its part (torch.distributed.checkpoint's layout), any number resumes"
shard=(--state_dict_type=sharded)
timeout 300 "$fit" "${ckpt[@]}" --devices=2 "${sharded[@]}" "${shard[@]}" --max_epochs=2 --default_root_dir=sh_fsdp \
  >sh_fsdp.out 2>&1 || fail "fsdp with sharded checkpoints: $(tail -3 sh_fsdp.out)"
ls "$(last sh_fsdp)"/__0_0.distcp "$(last sh_fsdp)"/__1_0.distcp "$(last sh_fsdp)"/.metadata "$(last sh_fsdp)"/meta.pt \
  >/dev/null 2>&1 || fail "the sharded checkpoint folder lacks a rank's file or an index: $(ls -A "$(last sh_fsdp)")"
[[ -z $(find sh_fsdp -name '*.tmp-*') ]] || fail "a sharded save left temporary files: $(find sh_fsdp -name '*.tmp-*')"
# Kiln reads it back as the full checkpoint of the same training, bit for bit (the checkpoint's kind changes nothing
# in training).
"$compare" "$(last ck_fsdp)" "$(last sh_fsdp)" 0 --with_optimizer >sh_compare.out 2>&1 ||
  fail "the sharded checkpoint is not the full one: $(cat sh_compare.out)"
echo "  sharded against full: $(cat sh_compare.out)"
# PyTorch reads it: dcp.load of the model, and everything through its converter, against the full checkpoint; and the
# check fails against another run's checkpoint.
if "$python" -c "import torch.distributed.checkpoint" >dcp_import.err 2>&1; then
  "$python" "$check_dcp" "$(last sh_fsdp)" "$(last ck_fsdp)" >dcp.out 2>&1 ||
    fail "PyTorch's torch.distributed.checkpoint does not read it as the full checkpoint: $(grep -v Warn dcp.out | tail -4)"
  echo "  $(tail -1 dcp.out)"
  "$python" "$check_dcp" "$(last sh_fsdp)" "$(last ck_e1)" >dcp_other.out 2>&1 &&
    fail "the PyTorch check passed against another run's checkpoint"
else
  echo "  SKIPPED (this part only): no PyTorch at $(cat "$python_where") to read it with (tools/setup.sh installs it):" \
    "$(tail -1 dcp_import.err)"
fi
# Saved by 2 ranks, resumed by 2 and 4 under fsdp and 4 under ddp: each ends bit for bit as from the full checkpoint.
timeout 300 "$fit" "${ckpt[@]}" --devices=2 "${sharded[@]}" "${shard[@]}" --max_epochs=1 --default_root_dir=sh_e1 \
  >sh_e1.out 2>&1 || fail "fsdp, one epoch, sharded: $(tail -3 sh_e1.out)"
for spec in "fsdp2 --devices=2 ${sharded[*]}" "fsdp4 --devices=4 ${sharded[*]}" "ddp4 --devices=4 --strategy=ddp"; do
  set -- $spec
  timeout 300 "$fit" "${ckpt[@]}" "${@:2}" --max_epochs=2 --ckpt_path="$(last sh_e1)" --default_root_dir=sh_r_$1 \
    >sh_r_$1.out 2>&1 || fail "resuming the sharded checkpoint with $1: $(tail -3 sh_r_$1.out)"
  "$compare" "$(last ck_r_$1)" "$(last sh_r_$1)" 0 --with_optimizer >/dev/null ||
    fail "$1 resumed from the sharded checkpoint does not end as from the full one"
done
# SIGKILL part-way, then --ckpt_path=last: bit for bit the uninterrupted run (whose checkpoints were full ones).
kill_after_checkpoint kill_s1 "$(last kill_s)/meta.pt" "${long[@]}" "${shard[@]}" --default_root_dir=kill_s
timeout 300 "$fit" "${long[@]}" "${shard[@]}" --default_root_dir=kill_s --ckpt_path=last --summary_json=kill_s.json \
  >kill_s2.out 2>&1 || fail "resuming a sharded checkpoint after SIGKILL: $(tail -3 kill_s2.out)"
grep -q "Restored from checkpoint" kill_s2.out || fail "the killed sharded run did not resume from a checkpoint"
[[ -n $(sha kill_a.json) && $(sha kill_s.json) == $(sha kill_a.json) ]] ||
  fail "resumed after SIGKILL from a sharded checkpoint, fsdp ends with $(sha kill_s.json), not $(sha kill_a.json)"
[[ -z $(find kill_s -name '*.tmp-*') ]] || fail "the resumed run left the killed run's temporaries: $(find kill_s -name '*.tmp-*')"

echo "== what is not built yet is refused before training, with what to do"
refused() {  # NAME EXPECTED ARGS...
  local name=$1 expected=$2
  shift 2
  if timeout 120 "$fit" "${common[@]}" --default_root_dir="$work/$name" "$@" >"$name.out" 2>&1; then
    fail "$name: fit succeeded"
  fi
  grep -qF -- "$expected" "$name.out" || fail "$name: no '$expected' in: $(tail -2 "$name.out")"
  [[ ! -d $work/$name/lightning_logs/version_0/checkpoints ]] || fail "$name left a checkpoint folder"
}
refused offload_no_shard "cpu_offload keeps each rank's shard in host memory, but sharding_strategy NO_SHARD" \
  --devices=2 --strategy=fsdp_cpu_offload --sharding_strategy=NO_SHARD
timeout 300 "$fit" "${common[@]}" --devices=2 --strategy=fsdp_cpu_offload --auto_wrap_policy=Linear \
  --summary_json=offload.json >fit_offload.out 2>&1 || fail "fit fsdp_cpu_offload: $(tail -3 fit_offload.out)"
grep -q "^Trained on cpu (fsdp_cpu_offload, 32-true)" fit_offload.out ||
  fail "no 'Trained on cpu (fsdp_cpu_offload' in: $(tail -3 fit_offload.out)"
refused not_fsdp "are fsdp's options, but the strategy is 'ddp'" --devices=2 --strategy=ddp --auto_wrap_policy=Linear
refused hybrid "--sharding_strategy='HYBRID' is not valid; pass FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD" \
  --devices=2 --strategy=fsdp --sharding_strategy=HYBRID
refused dict_type "--state_dict_type='shard' is not valid; pass full or sharded" --devices=2 --strategy=fsdp \
  --state_dict_type=shard
refused sharded_ddp "are fsdp's options, but the strategy is 'ddp'" --devices=2 --strategy=ddp --state_dict_type=sharded
# A folder that is not a sharded checkpoint, and one whose rank file is missing: refused, naming what is wrong.
mkdir -p not_sharded.ckpt
refused not_sharded "is a folder without meta.pt, so not a sharded checkpoint" --devices=2 "${sharded[@]}" \
  --ckpt_path="$work/not_sharded.ckpt"
cp -r "$(last sh_e1)" missing_rank.ckpt && rm missing_rank.ckpt/__1_0.distcp
refused missing_rank "sharded checkpoint $work/missing_rank.ckpt is damaged or incomplete" --devices=2 "${sharded[@]}" \
  --ckpt_path="$work/missing_rank.ckpt"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: fsdp ends as ddp within the stated bound (bit for bit with 1 rank, and NO_SHARD at 2), on the CPU and the virtual NPU;" \
  "sharded checkpoints resume on 2 and 4 ranks as full ones do"
