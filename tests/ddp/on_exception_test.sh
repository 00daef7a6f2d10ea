#!/usr/bin/env bash
# OnExceptionCheckpoint from a user's program (tests/ddp/on_exception.cc), on 1 process and on 2 (DDP over Gloo):
# a step that throws on every rank at global step 3 leaves DIR/crash/on_exception.ckpt, complete (no temporary file
# beside it), at step 3 with the optimizer's state and the very weights the module had when it threw, and fit
# returns the step's error on every rank; a NaN loss at step 3 stops fit (Aborted) and leaves no file; a run that
# succeeds removes a stale file of an earlier crash, as Lightning's teardown does.
set -uo pipefail
program=$PWD/tests/ddp/on_exception
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
has() { grep -qx "$2" "$1" || fail "$1 has no line '$2': $(tr '\n' '|' <"$1")"; }
for devices in 1 2; do
  for mode in raise nan ok; do
    dir=$PWD/run_${devices}_$mode
    mkdir -p "$dir"
    timeout 300 "$program" "$devices" "$dir" "$mode" >"$dir.log" 2>&1 ||
      { tail -5 "$dir.log"; fail "$devices process(es), $mode: the program failed"; continue; }
    for ((rank = 0; rank < devices; rank++)); do
      result=$dir/result_rank$rank.txt
      [[ -s $result ]] || { fail "$result was not written"; continue; }
      case $mode in
        raise)
          has "$result" "status INTERNAL"
          has "$result" "message training_step raised: the user's step failed at global step 3"
          has "$result" "file 1" ;;
        nan)
          has "$result" "status ABORTED"
          has "$result" "file 0" ;;
        ok)
          has "$result" "status ok"
          has "$result" "file 0" ;;
      esac
    done
    if [[ $mode == raise ]]; then
      has "$dir/result_rank0.txt" "global_step 3"
      has "$dir/result_rank0.txt" "optimizer_states 1"
      has "$dir/result_rank0.txt" "weights same"
      leftovers=$(ls "$dir/crash" | grep -v '^on_exception.ckpt$')
      [[ -z $leftovers ]] || fail "$devices process(es): files beside the checkpoint: $leftovers"
    fi
  done
done
if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: OnExceptionCheckpoint saved where a user's step threw (1 and 2 processes) and fit returned the error;" \
  "nothing for a NaN stop; a successful run removed a stale file"
