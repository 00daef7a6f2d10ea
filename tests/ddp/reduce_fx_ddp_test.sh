#!/usr/bin/env bash
# reduce_fx with sync_dist across 2 real processes: tests/ddp/reduce_fx_ddp.cc checks every rank's values.
set -uo pipefail
program=$PWD/tests/ddp/reduce_fx_ddp
work=${TEST_TMPDIR:-$(mktemp -d)}
timeout 300 "$program" "$work" >"$work/out.log" 2>"$work/err.log"
status=$?
grep -v "^[IW][0-9]" "$work/err.log" | grep -v "^\[" | tail -5
cat "$work/out.log"
if ((status != 0)) || ! grep -q "^PASS" "$work/out.log"; then
  echo "FAIL: reduce_fx across processes (exit $status)"
  exit 1
fi
