#!/usr/bin/env bash
# A model built in configure_model on the meta device (kiln::MetaDeviceScope, trainer/core/meta_device.h), from a
# user's own program (tests/fsdp/meta_init.cc), on 1 process and on N.
#
# Equality. The scope draws nothing; the strategy (fsdp unit by unit, every other one at once before its setup) runs
# the construction's recorded operators again, in their order, on the host: the same operators draw the same numbers
# from the CPU generator that configure_model seeded, and nothing draws between. So the parameters are the normal
# construction's bit for bit, every rank starts from rank 0's as before, and every step's loss and the trained model
# are the same bits: the comparisons below allow no difference at all.
#
# Memory. fsdp makes each unit, broadcasts it, flattens it and keeps its shard before it makes the next, so a rank
# holds at most its shards (shard_bytes), the unit being made, its flat copy and its broadcast bucket (3 x
# largest_unit_bytes), and what the process group and the first collectives touch (16 MB allowed; 8 MB measured).
# Built normally, the whole model is in every process, and the broadcast of rank 0's parameters flattens it into one
# bucket more: above model_bytes. glibc keeps freed heap memory for reuse (a unit freed, the next drawn elsewhere)
# and the peak would count it; MALLOC_MMAP_THRESHOLD_ makes every allocation of 1 MiB or more its own mapping, given
# back when freed, so that the peak counts what is alive.
set -uo pipefail
run=$PWD/tests/fsdp/meta_init
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
train() {  # NAME ARGS...: trains, leaving NAME.rank<R>.txt
  local name=$1
  shift
  timeout 300 "$run" "$name" "$@" 2>"$name.err" || fail "$name ($*) failed: $(grep -v '^[IW\[]' "$name.err" | tail -3)"
}
strip() { grep -v '_bytes ' "$1"; }  # The losses and parameters, without the memory figures.
same() {  # A B RANKS: B's files are A's bit for bit (every rank's), and every rank ends with the same model
  local before=$failures
  for ((r = 0; r < $3; ++r)); do
    [[ -s $1.rank$r.txt && -s $2.rank$r.txt ]] || { fail "$1 or $2 wrote no file for rank $r"; continue; }
    cmp -s <(strip "$1.rank$r.txt") <(strip "$2.rank$r.txt") || fail "$2 (meta) is not bit for bit $1 on rank $r"
    cmp -s <(grep -v -e '^loss ' -e '_bytes ' "$2.rank0.txt") <(grep -v -e '^loss ' -e '_bytes ' "$2.rank$r.txt") ||
      fail "$2: rank $r's model differs from rank 0's"
  done
  ((failures == before)) && echo "  $2 against $1: bit for bit ($(grep -c '^loss ' "$2.rank0.txt") losses and the model, $3 rank(s))"
}
field() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

echo "== one device, ddp and fsdp on the CPU: built on meta, trained as built normally"
train single strategy=single_device devices=1 meta=0
train single_meta strategy=single_device devices=1 meta=1
same single single_meta 1
train ddp2 strategy=ddp devices=2 meta=0
train ddp2_meta strategy=ddp devices=2 meta=1
same ddp2 ddp2_meta 2
for n in 2 4; do
  train fsdp$n devices=$n meta=0
  train fsdp${n}_meta devices=$n meta=1
  same fsdp$n fsdp${n}_meta $n
done

echo "== built outside configure_model, under Trainer::init_module(empty_init)"
train single_init strategy=single_device devices=1 meta=0 where=init_module
train single_init_meta strategy=single_device devices=1 meta=1 where=init_module
same single_init single_init_meta 1
train fsdp2_init devices=2 meta=0 where=init_module
train fsdp2_init_meta devices=2 meta=1 where=init_module
same fsdp2_init fsdp2_init_meta 2

echo "== fsdp on 4 virtual NPUs, and a model larger than one of them"
export VIRTUAL_NPU_DEVICES=4
train npu4 accelerator=virtual_npu devices=4 meta=0
train npu4_meta accelerator=virtual_npu devices=4 meta=1
same npu4 npu4_meta 4
# 16.59 MB of parameters (tests/fsdp/fsdp_test.sh's big model), each device limited to 16 MB: the ranks never hold it
# whole, in host memory or on the device.
export VIRTUAL_NPU_MEMORY_LIMIT=16000000
train big_meta accelerator=virtual_npu devices=4 meta=1 width=256 depth=64 batches=2 params=0
[[ $(grep -c '^loss ' big_meta.rank0.txt 2>/dev/null) == 2 ]] && echo "  big_meta: trained 2 steps on 4 devices of 16 MB" ||
  fail "big_meta did not train its 2 steps"
unset VIRTUAL_NPU_MEMORY_LIMIT VIRTUAL_NPU_DEVICES

echo "== memory: fsdp on 4 ranks never holds the whole model in one process"
big=(devices=4 width=1024 depth=48 batches=1 params=0)
export MALLOC_MMAP_THRESHOLD_=1048576
train mem_meta "${big[@]}" meta=1
train mem_normal "${big[@]}" meta=0
unset MALLOC_MMAP_THRESHOLD_
model=$(field mem_meta.rank0.txt model_bytes)
bound=$(($(field mem_meta.rank0.txt shard_bytes) + 3 * $(field mem_meta.rank0.txt largest_unit_bytes) + 16 * 1024 * 1024))
echo "  model $model bytes; bound for a rank built on meta: $bound bytes (shard + 3 units + 16 MB)"
for r in 0 1 2 3; do
  meta=$(field mem_meta.rank$r.txt rss_growth_bytes)
  normal=$(field mem_normal.rank$r.txt rss_growth_bytes)
  echo "  rank $r: peak resident growth while set up: built on meta $meta bytes, built normally $normal bytes"
  [[ -n $meta && $meta -ge 0 && $meta -le $bound ]] || fail "rank $r built on meta peaked at ${meta:-?} bytes (bound $bound)"
  [[ -n $normal && $normal -gt $model ]] || fail "rank $r built normally peaked at ${normal:-?} bytes, not above the model's $model"
done

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS"
