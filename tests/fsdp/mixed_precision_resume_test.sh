#!/usr/bin/env bash
# fsdp's checkpoints under mixed precision (bf16-mixed, which implies bfloat16 parameters and reductions), 2 real
# processes over Gloo (tests/fsdp/fsdp_run.cc): a checkpoint holds the float32 shards' values, not their bfloat16
# copies, and a run resumed from it ends bit for bit where the uninterrupted run ends, for full and sharded
# checkpoints alike. Bit for bit, derived: the resumed run restores the same float32 shards and Adam state, and each
# later step computes the same bfloat16 arithmetic on the same bits (the casts are per element).
set -uo pipefail
run=$PWD/tests/fsdp/fsdp_run
python=$PWD/../lightning_python/python  # PyTorch from PyPI (tools/setup.sh), to read the full checkpoint with.
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
train() {  # NAME ARGS...
  local name=$1
  shift
  timeout 300 "$run" "$name" precision=bf16-mixed optimizer=adam "$@" 2>"$name.err" ||
    fail "$name ($*) failed: $(grep -v '^[IW]' "$name.err" | tail -3)"
}
for type in full sharded; do
  mkdir -p "$type" && cd "$type" || exit 1
  train saved epochs=2 save=1 state_dict_type=$type
  saved=$(ls -d "$PWD"/checkpoints/*.ckpt 2>/dev/null | head -1)
  [[ -n $saved ]] || fail "$type: no checkpoint saved"
  train resumed epochs=3 state_dict_type=$type "resume=${saved:-none}"
  train straight epochs=3 state_dict_type=$type
  "$run" compare straight.rank0.txt resumed.rank0.txt 0 >/dev/null ||
    fail "$type: the resumed run ended elsewhere than the uninterrupted one: $("$run" compare straight.rank0.txt resumed.rank0.txt 0)"
  "$run" compare saved.rank0.txt straight.rank0.txt 0 >/dev/null && fail "$type: 2 and 3 epochs ended alike"
  if [[ $type == full ]] && "$python" -c "import torch" 2>/dev/null; then
    # Every parameter float32, and not all of them bfloat16 values (which a bfloat16 copy's would be).
    "$python" - "$saved" <<'PY' || fail "the full checkpoint holds bfloat16-rounded parameters"
import sys, torch
state = torch.load(sys.argv[1], weights_only=False, map_location="cpu")["state_dict"]
bad = [k for k, v in state.items() if v.dtype != torch.float32 or bool((v == v.bfloat16().float()).all())]
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
  fi
  cd "$work" || exit 1
done
if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: under bf16-mixed fsdp checkpoints hold float32 shards, and runs resumed from full and sharded ones end bit for bit"
