#!/usr/bin/env bash
# fit adopting a vendor's LibTorch library as it ships (tests/vendor_stack/acme_torch.cc, built by plain g++): the
# library is loaded only when its accelerator is chosen; its device trains as the CPU does, alone and with 2 processes
# under ddp and fsdp on its own c10d backend (accl, found by its creator), with the CPU run's parameters bit for bit;
# the staged backend is there by name; and the mistakes a vendor or user makes end with exit status 2 and one
# line naming the value and the fix.
set -uo pipefail
fit=trainer/cli/fit
library=$PWD/tests/vendor_stack/libacme_torch.so
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

sha() { sed -n -E 's/.*"params_sha256": "([0-9a-f]{64})".*/\1/p' "$1" 2>/dev/null; }

# train <label> <flags...>: runs fit into $tmp/<label>; fails the test unless it exits 0.
train() {
  local label=$1
  shift
  $fit --max_epochs=2 --enable_progress_bar=false --enable_checkpointing=false --default_root_dir="$tmp/$label" \
    --summary_json="$tmp/$label.json" "$@" >"$tmp/$label.out" 2>"$tmp/$label.err"
  local status=$?
  [[ $status -eq 0 ]] || fail "$label: fit $* exited $status: $(tail -n 3 "$tmp/$label.err")"
}

expect_same() {  # expect_same <label> <reference label>
  local got want
  got=$(sha "$tmp/$1.json")
  want=$(sha "$tmp/$2.json")
  [[ -n "$got" && -n "$want" ]] || { fail "$1 or $2 wrote no params_sha256"; return; }
  [[ "$got" == "$want" ]] || fail "$1: parameters differ from $2's ($got vs $want)"
}

expect_backend() {  # expect_backend <label> <process group backend>
  grep -qF "\"process_group_backend\": \"$2\"" "$tmp/$1.json" || fail "$1: the plan names no $2 backend: $(cat "$tmp/$1.json")"
}

# refused <label> <status> <words> <flags...>: fit must exit <status> and say <words> on stderr.
refused() {
  local label=$1 want=$2 words=$3
  shift 3
  $fit --max_epochs=1 --enable_progress_bar=false --default_root_dir="$tmp/$label" "$@" >"$tmp/$label.out" \
    2>"$tmp/$label.err"
  local status=$?
  [[ $status -eq $want ]] || fail "$label: exit $status, not $want: $(tail -n 3 "$tmp/$label.err")"
  grep -qF -- "$words" "$tmp/$label.err" || fail "$label: no '$words' in: $(tail -n 5 "$tmp/$label.err")"
}

adopt=(--accelerator_library="acme_npu=$library" --accelerator=acme_npu)

# One device: the kit's kernels compute through the CPU's, so the parameters are the CPU's.
train cpu --accelerator=cpu --devices=1
train one "${adopt[@]}" --devices=1
grep -q "^Trained on acme_npu (single_device, 32-true)" "$tmp/one.out" || fail "one: $(cat "$tmp/one.out")"
expect_same one cpu
# The one line saying what the library lacks, and the backend Kiln found.
grep -q "lacks: memory statistics" "$tmp/one.err" || fail "one: no 'lacks:' line in: $(head -n 5 "$tmp/one.err")"
grep -qF "c10d backend(s) accl (acme::ProcessGroupACCL::createProcessGroupACCL)" "$tmp/one.err" ||
  fail "one: the library's c10d backend was not found: $(head -n 5 "$tmp/one.err")"

# Named but not chosen: never loaded.
train unchosen --accelerator_library="acme_npu=$library" --accelerator=cpu --devices=1
grep -q "acme_npu (" "$tmp/unchosen.err" && fail "unchosen: the library was loaded though cpu was chosen"
expect_same unchosen cpu

# Two processes on the library's own c10d backend: with two ranks every sum is a + b, so the parameters are two CPU
# processes' on Gloo, for ddp and for fsdp.
for strategy in ddp fsdp; do
  train "cpu_$strategy" --accelerator=cpu --devices=2 --strategy=$strategy
  train "acme_$strategy" "${adopt[@]}" --devices=2 --strategy=$strategy
  expect_backend "acme_$strategy" accl
  expect_same "acme_$strategy" "cpu_$strategy"
done
# The PATH form takes its name from --accelerator; Kiln's staged collectives by name.
train staged --accelerator_library="$library" --accelerator=acme_npu --devices=2 --strategy=ddp \
  --process_group_backend=acme_npu_staged
expect_backend staged acme_npu_staged
expect_same staged cpu_ddp

# Mistakes.
refused no_backend 2 "it brings 'accl', 'acme_npu_staged', and 'gloo' carries CPU tensors; set process_group_backend to one of them" "${adopt[@]}" --devices=2 --strategy=ddp \
  --process_group_backend=hccl
refused missing 2 "does not exist" --accelerator_library="acme_npu=$tmp/none/libacme_torch.so" --accelerator=acme_npu
refused bare 2 "is a bare file name" --accelerator_library=acme_npu=libacme_torch.so --accelerator=acme_npu
refused other_name 2 "names its device 'acme_npu', not 'zeta_npu'" --accelerator_library="zeta_npu=$library" \
  --accelerator=zeta_npu
refused no_name 2 "needs the accelerator's name" --accelerator_library="$library"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS: the vendor's library adopted by fit: one device and ddp/fsdp on its c10d backend equal to the CPU's"
