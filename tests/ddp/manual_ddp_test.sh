#!/usr/bin/env bash
# Manual optimization under DDP and under FSDP, 2 real CPU processes (tests/ddp/manual_ddp.cc): the ranks end with the
# same parameters (manual_backward reduced the gradients), and exactly where automatic optimization of the same module
# ends (the same reducer or shards, the same steps), with the same global step and learning-rate schedule; FSDP ends
# bit for bit where DDP does. The same for gradient accumulation over 2 batches: by hand with
# toggle_model(sync_grad=false) on the window's first batch (each rank's gradients stay its own: they must differ
# between the ranks there), and with accumulate_grad_batches=2.
set -uo pipefail
program=$PWD/tests/ddp/manual_ddp
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
for mode in manual automatic; do
  mkdir -p "$mode"
  timeout 300 "$program" "$mode" "$PWD/$mode" 2>"$mode.err" || { tail -5 "$mode.err"; fail "$mode run failed"; }
done
for file in manual/manual_rank0.txt manual/manual_rank1.txt automatic/automatic_rank0.txt; do
  [[ -s $file ]] || fail "$file was not written"
done
cmp -s manual/manual_rank0.txt manual/manual_rank1.txt || fail "the two ranks of the manual run differ"
cmp -s manual/manual_rank0.txt automatic/automatic_rank0.txt ||
  { diff manual/manual_rank0.txt automatic/automatic_rank0.txt | head; fail "manual and automatic DDP differ"; }
grep -qx "global_step 8" manual/manual_rank0.txt || fail "global_step is $(head -1 manual/manual_rank0.txt), not 8"
# The same under fsdp (the module's parameters sharded in its root unit): manual equals automatic bit for bit, and
# both end as ddp does (2 ranks: the averaged gradients are the same sums).
for mode in manual automatic; do
  mkdir -p "fsdp_$mode"
  timeout 300 "$program" "$mode" "$PWD/fsdp_$mode" fsdp 2>"fsdp_$mode.err" ||
    { tail -5 "fsdp_$mode.err"; fail "fsdp $mode run failed"; }
done
cmp -s fsdp_manual/manual_rank0.txt fsdp_manual/manual_rank1.txt || fail "the two ranks of fsdp's manual run differ"
cmp -s fsdp_manual/manual_rank0.txt fsdp_automatic/automatic_rank0.txt ||
  { diff fsdp_manual/manual_rank0.txt fsdp_automatic/automatic_rank0.txt | head; fail "manual and automatic fsdp differ"; }
cmp -s fsdp_manual/manual_rank0.txt manual/manual_rank0.txt ||
  { diff fsdp_manual/manual_rank0.txt manual/manual_rank0.txt | head; fail "manual fsdp and manual ddp differ"; }
# Gradient accumulation by hand under DDP and FSDP, against accumulate_grad_batches=2.
for strategy in ddp fsdp; do
  for mode in manual_accumulate automatic_accumulate; do
    mkdir -p "${strategy}_$mode"
    timeout 300 "$program" "$mode" "$PWD/${strategy}_$mode" "$strategy" 2>"${strategy}_$mode.err" ||
      { tail -5 "${strategy}_$mode.err"; fail "$strategy $mode run failed"; }
  done
  manual=${strategy}_manual_accumulate/manual_accumulate_rank
  automatic=${strategy}_automatic_accumulate/automatic_accumulate_rank0.txt
  cmp -s <(grep -v local_grad "${manual}0.txt") <(grep -v local_grad "${manual}1.txt") ||
    fail "the two ranks of $strategy's accumulation by hand end with different parameters"
  cmp -s <(grep -v local_grad "${manual}0.txt") "$automatic" ||
    { diff <(grep -v local_grad "${manual}0.txt") "$automatic" | head; fail "$strategy: accumulation by hand and accumulate_grad_batches=2 differ"; }
  grep -qx "global_step 4" "${manual}0.txt" || fail "$strategy: accumulation by hand took $(head -1 "${manual}0.txt"), not 4"
done
cmp -s ddp_automatic_accumulate/automatic_accumulate_rank0.txt fsdp_automatic_accumulate/automatic_accumulate_rank0.txt ||
  fail "accumulate_grad_batches=2 under fsdp and ddp differ"
# Under ddp, toggle_model(sync_grad=false) kept each rank's gradients local: their sums differ between the ranks.
locals0=$(grep -c '^local_grad' ddp_manual_accumulate/manual_accumulate_rank0.txt)
[[ $locals0 -eq 4 ]] || fail "ddp: $locals0 unsynced backward passes recorded, not 4"
if [[ -n $(comm -12 <(grep '^local_grad' ddp_manual_accumulate/manual_accumulate_rank0.txt | sort) \
  <(grep '^local_grad' ddp_manual_accumulate/manual_accumulate_rank1.txt | sort)) ]]; then
  fail "ddp: a gradient under toggle_model(sync_grad=false) was the same on both ranks (it was all-reduced)"
fi
if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
values=$(wc -l <manual/manual_rank0.txt)
echo "PASS: manual optimization under 2-process DDP and FSDP ends bit for bit where automatic does ($values values)," \
  "gradient accumulation by hand (toggle_model(sync_grad=false), gradients kept local) too"
