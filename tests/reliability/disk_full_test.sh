#!/usr/bin/env bash
# The disk fills up while fit writes a checkpoint: a clear error naming the file, a non-zero exit, and the previous
# checkpoint intact (byte for byte, and it still resumes). The full disk is simulated with a file-size limit
# (ulimit -f): fit ignores SIGXFSZ, so a write past the limit fails with EFBIG, as one fails with ENOSPC on a full
# disk (both go through the same path in trainer/checkpoint/checkpoint_io.cc). A small filesystem would need mount rights,
# which a Bazel sandbox does not give.
set -uo pipefail
fit=trainer/cli/fit
verify=tests/reliability/verify_checkpoints
work=${TEST_TMPDIR:-$(mktemp -d)}
run=(--logger=none --report=false --max_epochs=1 --num_train=1024 --num_val=256 --enable_progress_bar=false --log_every_n_steps=0
     --default_root_dir="$work/run")
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

$fit "${run[@]}" >"$work/first.log" 2>&1 || { echo "FAIL: the first run failed: $(tail -3 "$work/first.log")"; exit 1; }
checkpoints=$work/run/checkpoints
[[ -f $checkpoints/last.ckpt ]] || { echo "FAIL: the first run wrote no last.ckpt"; exit 1; }
mkdir -p "$work/before"
cp -p "$checkpoints"/*.ckpt "$work/before/"
size_kb=$(( $(stat -c %s "$checkpoints/last.ckpt") / 1024 ))
limit_kb=$(( size_kb / 2 ))
echo "checkpoints of $size_kb KiB; the second run may write files of $limit_kb KiB at most"

# One more epoch from the checkpoint, with too little room for the next one.
(ulimit -f "$limit_kb"; exec $fit "${run[@]}" --max_epochs=2 --ckpt_path=last) >"$work/full.log" 2>&1
code=$?
echo "exit status $code; $(grep -m1 '^error' "$work/full.log")"
[[ $code -ne 0 ]] || fail "fit exited 0 although its checkpoint could not be written"
[[ $code -lt 128 ]] || fail "fit was killed by signal $((code - 128)) instead of reporting the error"
# The background writer's error reaches fit either at the next save or when fit waits for the writes to finish,
# so the line may start with the save that noticed it.
grep -qE "^error: (.*: )?cannot write checkpoint $checkpoints/[^ ]+\.ckpt\.tmp-[0-9]+: File too large; the previous checkpoint \(if any\) is intact" \
  "$work/full.log" || fail "no clear error naming the file: $(grep -m1 error "$work/full.log")"

for before in "$work/before"/*.ckpt; do
  cmp -s "$before" "$checkpoints/$(basename "$before")" || fail "$(basename "$before") changed or disappeared"
done
shopt -s nullglob
leftovers=("$checkpoints"/*.tmp-*)
shopt -u nullglob
[[ ${#leftovers[@]} -eq 0 ]] || fail "temporary files were left behind: ${leftovers[*]}"
$verify "$checkpoints"/*.ckpt || fail "a checkpoint left after the failure is incomplete"

# With room again, the run resumes from the intact checkpoint and finishes.
$fit "${run[@]}" --max_epochs=2 --ckpt_path=last >"$work/resumed.log" 2>&1 ||
  fail "resuming after the failure failed: $(grep -m1 '^error' "$work/resumed.log")"
grep -q "Restored from checkpoint $checkpoints/" "$work/resumed.log" || fail "the resumed run did not restore"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "a full disk stops fit with a clear error and keeps the previous checkpoint"
