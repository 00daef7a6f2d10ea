#!/usr/bin/env bash
# Runs the real //tools:accelerators binary and checks what it lists.
set -euo pipefail
out=$(tools/accelerators --stats)
echo "$out"
fail() { echo "FAIL: $1"; exit 1; }
grep -qE '^cpu +- +0  yes +1  ' <<<"$out" || fail "cpu is not listed as available with 1 device"
grep -qE 'process_rss_bytes +[0-9]' <<<"$out" || fail "--stats printed no process_rss_bytes for cpu"
grep -qE 'machine_memory_total_bytes +[0-9]' <<<"$out" || fail "--stats printed no machine_memory_total_bytes"
if tools/accelerators | grep -q process_rss_bytes; then fail "statistics printed without --stats"; fi
echo "accelerators listing ok"
