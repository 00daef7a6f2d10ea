#!/usr/bin/env bash
# FSDP mixed precision against the real Lightning 2.6 (tools/setup.sh): the same module, weights, batches and
# optimizer on 2 CPU processes over Gloo, in Kiln (tests/fsdp/mixed_precision.cc, a user's program setting
# TrainerOptions::fsdp.mixed_precision) and in Lightning (fsdp_mixed_precision.py: FSDPStrategy(mixed_precision=
# MixedPrecision(...)), PyTorch's FullyShardedDataParallel underneath), and the final parameters compared.
#
# The tolerance is zero, derived: both sides run LibTorch 2.11's CPU kernels on the same bits. Each rank casts its
# float32 shard to bfloat16 and gathers the casts (a cast is per element, so the gathered parameters are the same
# bits however the shards are cut), computes its batch in bfloat16 with the same kernels, and reduces: each rank's
# gradient divided by 2 (exact in binary) and the two summed in reduce_dtype (a sum of two terms is one rounding, in
# either order; PyTorch's FSDP divides 2 ranks' gradients before the sum, Kiln too), cast to float32 into the shard's
# gradient; SGD steps the float32 shard elementwise, the same arithmetic on each element whether the tensor is a
# parameter or a shard. So every parameter must be the same bits after the 8 steps. The premise is checked first:
# without mixed precision the two runs must already end bit for bit.
set -uo pipefail
kiln=$PWD/tests/fsdp/mixed_precision
script=$PWD/tests/lightning/fsdp_mixed_precision.py
source "$PWD/tests/lightning/common.sh"

# Lines "name dtype v v ..." (hexadecimal floats) of two files: what differs. Parameters must match in type and
# values; buffers in values (PyTorch's FSDP leaves them in buffer_dtype after a forward, Kiln puts them back).
compare() {
  "$python" - "$1" "$2" <<'PY'
import sys
def read(path):
    return {f[0]: (f[1], [float.fromhex(x) for x in f[2:]]) for f in (l.split() for l in open(path)) if f and f[0] != "global_step"}
a, b = read(sys.argv[1]), read(sys.argv[2])
bad = []
for name, (dtype, values) in a.items():
    if name not in b or len(b[name][1]) != len(values):
        bad.append(f"{name}: missing or of another size"); continue
    if name != "scale" and dtype != b[name][0]:
        bad.append(f"{name}: {dtype} against {b[name][0]}")
    diff = max((abs(x - y) for x, y in zip(values, b[name][1])), default=0.0)
    if diff > 0:
        bad.append(f"{name}: differs by up to {diff:.3g}")
print("\n".join(bad))
PY
}

run_kiln() {  # NAME ARGS...: Kiln's run on 2 processes, NAME.txt (rank 0) and NAME.txt.rank1
  local name=$1
  shift
  timeout 300 "$kiln" "$name.txt" devices=2 "$@" 2>"$name.err" || { grep -v '^[IW]' "$name.err" | tail -5; fail "Kiln's $name run failed"; return 1; }
  cmp -s "$name.txt" "$name.txt.rank1" || fail "Kiln's $name: the ranks ended with different models"
}

# NAME PARAM REDUCE BUFFER (Lightning's names: bf16, fp32, none)
for run in "plain none none none" "bf16 bf16 bf16 bf16" "bf16_fp32_reduce bf16 fp32 bf16"; do
  set -- $run
  name=$1 param=$2 reduce=$3 buffer=$4
  args=()
  [[ $param != none ]] && args=(param_dtype=$param reduce_dtype=$reduce buffer_dtype=$buffer)
  run_kiln "kiln_$name" "${args[@]}" || continue
  lightning "$script" "lightning_$name.txt" "$param" "$reduce" "$buffer" || { fail "Lightning's $name run failed"; continue; }
  differences=$(compare "kiln_$name.txt" "lightning_$name.txt")
  if [[ -n $differences ]]; then
    echo "$differences" | head -12
    if [[ $name == plain ]]; then
      fail "without mixed precision Kiln and Lightning already end apart: the comparison's premise fails"
    else
      fail "$name: Kiln's final weights differ from Lightning's"
    fi
  fi
  grep -q "^net.0.weight Float " "kiln_$name.txt" || fail "$name: Kiln's parameters are not float32 after the run"
  grep -q "^scale Float " "kiln_$name.txt" || fail "$name: Kiln's buffer is not back in float32 after the run"
  grep -qx "global_step 8" "kiln_$name.txt" || fail "$name: Kiln took $(grep global_step "kiln_$name.txt"), not 8 steps"
done
# The comparison can fail: mixed precision changes the result, and so does the type of the reduction.
[[ -z $(compare kiln_plain.txt kiln_bf16.txt) ]] && fail "bfloat16 computation ended where float32 did"
[[ -z $(compare kiln_bf16.txt kiln_bf16_fp32_reduce.txt) ]] && fail "a float32 reduction ended where bfloat16's did"

# The precision implies the mixed precision when none is given (Lightning's FSDPPrecision): bf16-mixed is
# MixedPrecision(bfloat16, bfloat16, bfloat16), here under the bf16-mixed plugin's autocast, which both runs share.
run_kiln implied precision=bf16-mixed
run_kiln explicit precision=bf16-mixed param_dtype=bf16 reduce_dtype=bf16 buffer_dtype=bf16
run_kiln explicit_fp32 precision=bf16-mixed param_dtype=fp32 reduce_dtype=fp32 buffer_dtype=fp32
[[ -z $(compare implied.txt explicit.txt) ]] || fail "bf16-mixed did not imply bfloat16 mixed precision: $(compare implied.txt explicit.txt | head -3)"
[[ -z $(compare implied.txt explicit_fp32.txt) ]] && fail "an explicit float32 mixed precision did not override bf16-mixed's"
finish "FSDP mixed precision (bfloat16 parameters, bfloat16 and float32 reductions) ends bit for bit where Lightning's does, on 2 processes"
