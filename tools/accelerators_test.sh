#!/usr/bin/env bash
# Runs the real //tools:accelerators binary and checks what it lists.
set -euo pipefail
out=$(tools/accelerators --stats)
echo "$out"
fail() { echo "FAIL: $1"; exit 1; }
grep -qE '^cpu +- +0  yes +1  ' <<<"$out" || fail "cpu is not listed as available with 1 device"
grep -qE 'process_rss_bytes +[0-9]+$' <<<"$out" || fail "--stats printed no whole process_rss_bytes for cpu"
grep -qE 'machine_memory_total_bytes +[0-9]' <<<"$out" || fail "--stats printed no machine_memory_total_bytes"
if tools/accelerators | grep -q process_rss_bytes; then fail "statistics printed without --stats"; fi
# --stats covers every device an accelerator has (the virtual NPU has 2; "auto" uses 1); --devices picks others.
[[ $(grep -cE '^ +device virtual_npu:[01]:$' <<<"$out") -eq 2 ]] ||
  fail "--stats did not list both of the virtual NPU's devices: $(grep -E 'device virtual_npu' <<<"$out")"
auto=$(tools/accelerators --stats --devices=auto)
[[ $(grep -cE '^ +device virtual_npu:' <<<"$auto") -eq 1 ]] || fail "--devices=auto did not list one virtual NPU device"
# The built-in hardware backends are always listed. Where one is unavailable (cuda and hpu on a machine without
# them), the row says "no" and the next line says why.
for name in cuda hpu; do
  row=$(awk -v n="$name" '$1 == n' <<<"$out")
  [[ -n "$row" ]] || fail "$name is not listed"
  case $(awk '{print $4}' <<<"$row") in
    yes) [[ $(awk '{print $5}' <<<"$row") -ge 1 ]] || fail "$name is available with no devices" ;;
    no)
      reason=$(awk -v n="$name" 'found {print; exit} $1 == n {found = 1}' <<<"$out")
      grep -qE '^ +why not: .{20,}' <<<"$reason" || fail "$name is unavailable without a 'why not:' line: $reason"
      ;;
    *) fail "$name row has no yes/no: $row" ;;
  esac
done
grep -qE '^cuda +gpu +20  ' <<<"$out" || fail "cuda is not listed with its alias gpu and priority 20"
grep -qE '^hpu +- +10  ' <<<"$out" || fail "hpu is not listed with priority 10"
# Plugins load as fit loads them: by flag and by KILN_ACCELERATOR_PLUGINS.
plugin=examples/sample_plugin/libkiln_sample_plugin.so
tools/accelerators --accelerator_plugin=$plugin | grep -qE '^sample_plugin +' || fail "--accelerator_plugin is not listed"
KILN_ACCELERATOR_PLUGINS=$PWD/$plugin tools/accelerators | grep -qE '^sample_plugin +' ||
  fail "KILN_ACCELERATOR_PLUGINS is not listed"
if err=$(tools/accelerators --accelerator_plugin=/nonexistent/libx.so 2>&1); then fail "a missing plugin exited 0"; fi
grep -qF "/nonexistent/libx.so" <<<"$err" || fail "the error for a missing plugin does not name it: $err"
echo "accelerators listing ok"
