#!/usr/bin/env bash
# A device that //tools:new_backend --device wrote (@acme_npu, unchanged) trains with --devices=2 --strategy=ddp
# through Kiln's fit: two processes, one per acme_npu device, reducing gradients over its "acme_npu_ccl" backend. As
# generated it computes through the CPU's kernels, so it must end with the parameters of 2 CPU processes, bit for bit.
set -uo pipefail
fit=tests/scaffold/fit_acme_npu
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
sha() { sed -n -E 's/.*"params_sha256": "([0-9a-f]{64})".*/\1/p' "$1" 2>/dev/null; }
common=(--max_epochs=2 --num_train=256 --num_val=64 --enable_progress_bar=false --log_every_n_steps=0
  --enable_checkpointing=false --num_sanity_val_steps=0 --process_group_timeout=60 --devices=2 --strategy=ddp)

$fit "${common[@]}" --accelerator=cpu --default_root_dir="$tmp/cpu" --summary_json="$tmp/cpu.json" \
  >"$tmp/cpu.out" 2>"$tmp/cpu.err" || fail "2 CPU processes: $(tail -n 3 "$tmp/cpu.err")"
$fit "${common[@]}" --accelerator=acme_npu --default_root_dir="$tmp/npu" --summary_json="$tmp/npu.json" \
  >"$tmp/npu.out" 2>"$tmp/npu.err" || fail "2 acme_npu devices: $(tail -n 5 "$tmp/npu.err")"
grep -q "^Trained on acme_npu (ddp, 32-true)" "$tmp/npu.out" || fail "no 'Trained on acme_npu (ddp' in: $(cat "$tmp/npu.out")"
grep -qF '"process_group_backend": "acme_npu_ccl"' "$tmp/npu.json" ||
  fail "the plan names no acme_npu_ccl backend: $(cat "$tmp/npu.json")"
grep -qF 'acme_npu:1' "$tmp/npu.json" || fail "the summary names no acme_npu:1 device: $(cat "$tmp/npu.json")"
cpu_sha=$(sha "$tmp/cpu.json")
npu_sha=$(sha "$tmp/npu.json")
echo "2 CPU processes: $cpu_sha; 2 acme_npu devices: $npu_sha"
[[ -n "$cpu_sha" && "$npu_sha" == "$cpu_sha" ]] || fail "2 acme_npu devices ended with $npu_sha, 2 CPU processes with $cpu_sha"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "the generated device trained data-parallel as the CPU does"
