#!/usr/bin/env bash
# Runs every Kiln benchmark. With KILN_BENCH_SMOKE set (CI), each runs a few short iterations only: the point is
# that they build and run, not their numbers.
set -euo pipefail
cd "$(dirname "$0")/../.." 2>/dev/null || true
[[ -d tests/bench ]] || cd "${RUNFILES_DIR:-$0.runfiles}/kiln"
extra=()
if [[ -n "${KILN_BENCH_SMOKE:-}" ]]; then extra=(--benchmark_min_time=0.01); fi
for bench in step_bench checkpoint_bench crc32_bench data_bench connector_bench process_bench reducer_bench \
  ddp_step_bench gather_on_use_bench; do
  echo "== $bench"
  tests/bench/$bench "${extra[@]}" 2>&1 | grep -v -E '^[IW][0-9]{8} ' || { echo "FAIL: $bench"; exit 1; }
done
