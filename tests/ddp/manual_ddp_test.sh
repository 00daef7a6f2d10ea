#!/usr/bin/env bash
# Manual optimization under DDP and under FSDP, 2 real CPU processes (tests/ddp/manual_ddp.cc): the ranks end with the
# same parameters (manual_backward reduced the gradients), and exactly where automatic optimization of the same module
# ends (the same reducer or shards, the same steps), with the same global step and learning-rate schedule; FSDP ends
# bit for bit where DDP does.
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
if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
values=$(wc -l <manual/manual_rank0.txt)
echo "PASS: manual optimization under 2-process DDP and FSDP ends bit for bit where automatic does ($values values)"
