#!/usr/bin/env bash
# Lightning's profilers from a user's program (tests/profilers/profile_program.cc), on 1 process and on 2 (ddp over
# Gloo, the Trainer's own launcher), and on the virtual NPU: the simple report's table has every hook the run called,
# as often as the module counted (check_report.py derives each count from the run's own), in one file per rank named
# as Lightning names them (fit-perf.txt; fit-perf-0.txt and fit-perf-1.txt); the advanced report nests the step in
# the batch; the pytorch trace is valid JSON with every hook's range, and the virtual NPU's own copies in it; a
# profiler object of the program's own sees every hook too.
set -uo pipefail
program=$PWD/tests/profilers/profile_program
check="python3 $PWD/tests/profilers/check_report.py"
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
run() {  # run NAME PROFILER DEVICES [ACCELERATOR]
  local name=$1
  shift
  timeout 300 "$program" "$work/$name" "$@" >"$work/$name.out" 2>"$work/$name.err" ||
    { grep -v '^[IW][0-9]' "$work/$name.err" | tail -5; fail "$name: the program failed"; return 1; }
}

run simple1 simple 1 &&
  { $check simple "$work/simple1/prof/fit-perf.txt" "$work/simple1/counts-0.txt" || fail simple1; }
[[ -e $work/simple1/prof/fit-perf-0.txt ]] && fail "one process: Lightning names the file without a rank"

if run simple2 simple 2; then
  for rank in 0 1; do
    $check simple "$work/simple2/prof/fit-perf-$rank.txt" "$work/simple2/counts-$rank.txt" || fail "simple2 rank $rank"
  done
  [[ -e $work/simple2/prof/fit-perf.txt ]] && fail "two processes: a file without a rank was written"
fi

# The program's own profiler object (TrainerOptions::profiler holds it), on 1 process and on 2: the trainer calls it
# as it calls its own, and its report goes where its own dirpath and filename say.
run custom1 custom 1 &&
  { $check custom "$work/custom1/prof/fit-perf.txt" "$work/custom1/counts-0.txt" || fail custom1; }
if run custom2 custom 2; then
  for rank in 0 1; do
    $check custom "$work/custom2/prof/fit-perf-$rank.txt" "$work/custom2/counts-$rank.txt" || fail "custom2 rank $rank"
  done
fi

run advanced1 advanced 1 && { $check advanced "$work/advanced1/prof/fit-perf.txt" "$work/advanced1/counts-0.txt" ||
  fail advanced1; }

run pytorch1 pytorch 1 && { $check trace "$work/pytorch1/prof/fit-perf.pt.trace.json" "$work/pytorch1/counts-0.txt" ||
  fail pytorch1; }
if run pytorch2 pytorch 2; then
  for rank in 0 1; do
    $check trace "$work/pytorch2/prof/fit-perf-$rank.pt.trace.json" "$work/pytorch2/counts-$rank.txt" ||
      fail "pytorch2 rank $rank"
  done
fi
run npu pytorch 1 virtual_npu && { $check trace "$work/npu/prof/fit-perf.pt.trace.json" "$work/npu/counts-0.txt" \
  virtual_npu || fail "virtual_npu"; }

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "the profilers, Kiln's and the program's own, report every hook of a user's program, on 1 and 2 processes and" \
  "on the virtual NPU"
