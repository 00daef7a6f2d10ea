#!/usr/bin/env bash
# Drives the real //trainer:fit with the sample out-of-tree device, which reaches the binary only through Kiln's
# WORKSPACE (kiln_backends): by name and alias, on either of its devices, through "auto" when its priority is
# raised, and with bad configuration. Every run on it must end with the CPU run's parameters, bit for bit
# (--summary_json's params_sha256).
set -uo pipefail
fit=trainer/cli/fit
accelerators=tools/accelerators
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

sha() { sed -n -E 's/.*"params_sha256": "([0-9a-f]{64})".*/\1/p' "$1" 2>/dev/null; }

# train <label> <env assignments...> -- <flags...>: runs fit into $tmp/<label>, keeping its output and summary.
train() {
  local label=$1
  shift
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" $fit --max_epochs=2 --enable_progress_bar=false --default_root_dir="$tmp/$label" \
    --summary_json="$tmp/$label.json" "$@" >"$tmp/$label.out" 2>"$tmp/$label.err"
  local status=$?
  [[ $status -eq 0 ]] || fail "$label: fit $* exited $status: $(tail -n 3 "$tmp/$label.err")"
}

expect_trained_on() {  # expect_trained_on <label> <accelerator> <device>
  grep -q "^Trained on $2 (single_device, 32-true) for 2 epochs" "$tmp/$1.out" ||
    fail "$1: no 'Trained on $2' line in: $(cat "$tmp/$1.out")"
  grep -qF "\"devices\": [\"$3\"]" "$tmp/$1.json" || fail "$1: the plan does not run on $3: $(cat "$tmp/$1.json")"
}

expect_cpu_parameters() {  # expect_cpu_parameters <label>
  local got
  got=$(sha "$tmp/$1.json")
  [[ -n "$got" ]] || { fail "$1: no params_sha256 in its summary"; return; }
  [[ "$got" == "$cpu_sha" ]] || fail "$1: parameters differ from the CPU run ($got vs $cpu_sha)"
}

# The device's name in plans and logs: its own (c10::register_privateuse1_backend).
device=virtual_npu

train cpu -- --accelerator=cpu
expect_trained_on cpu cpu cpu
cpu_sha=$(sha "$tmp/cpu.json")
[[ -n "$cpu_sha" ]] || fail "the CPU run wrote no params_sha256"

# By name, with no other hardware flag: "auto" devices means one virtual NPU.
train npu -- --accelerator=virtual_npu
expect_trained_on npu virtual_npu "$device:0"
expect_cpu_parameters npu
[[ -n "$(find "$tmp/npu" -name "*.ckpt")" ]] || fail "npu: no checkpoint written from the device"

# By alias, on the second device.
train npu1 -- --accelerator=vnpu --devices=1,
expect_trained_on npu1 virtual_npu "$device:1"
expect_cpu_parameters npu1

# "auto": its default priority (-10) keeps the CPU; a raised one wins over every built-in accelerator.
train auto_default -- --accelerator=auto
expect_trained_on auto_default cpu cpu
train auto_raised VIRTUAL_NPU_PRIORITY=100 -- --accelerator=auto
expect_trained_on auto_raised virtual_npu "$device:0"
expect_cpu_parameters auto_raised

# Resuming from a checkpoint written on the device continues exactly: 2 epochs, then on to 3, equals 3 at once.
train resume_a -- --accelerator=virtual_npu
env $fit --accelerator=virtual_npu --max_epochs=3 --enable_progress_bar=false --default_root_dir="$tmp/resume_a" \
  --ckpt_path=last --summary_json="$tmp/resumed.json" >/dev/null 2>"$tmp/resumed.err" ||
  fail "resume on virtual_npu failed: $(tail -n 3 "$tmp/resumed.err")"
grep -q '"resumed_from": ".*\.ckpt"' "$tmp/resumed.json" 2>/dev/null || fail "the resumed run did not resume"
$fit --accelerator=cpu --max_epochs=3 --enable_progress_bar=false --default_root_dir="$tmp/cpu3" \
  --summary_json="$tmp/cpu3.json" >/dev/null 2>&1 || fail "3-epoch CPU run failed"
[[ -n "$(sha "$tmp/cpu3.json")" && "$(sha "$tmp/resumed.json")" == "$(sha "$tmp/cpu3.json")" ]] ||
  fail "resumed virtual_npu run ($(sha "$tmp/resumed.json")) differs from 3 epochs on the CPU ($(sha "$tmp/cpu3.json"))"

# bf16-mixed: LibTorch has autocast for the out-of-tree device, and the sample declares it and registers the casts
# (autocast.cc). The run must learn the task as the CPU's does (4 classes: chance is 0.25; 2 epochs in float32 reach
# above 0.8).
env $fit --accelerator=virtual_npu --precision=bf16-mixed --max_epochs=2 --enable_progress_bar=false \
  --default_root_dir="$tmp/bf16" --summary_json="$tmp/bf16.json" >"$tmp/bf16.out" 2>"$tmp/bf16.err" ||
  fail "bf16-mixed on virtual_npu failed: $(tail -n 3 "$tmp/bf16.err")"
grep -q "^Trained on virtual_npu (single_device, bf16-mixed)" "$tmp/bf16.out" ||
  fail "bf16-mixed: no 'Trained on virtual_npu (single_device, bf16-mixed)' in: $(cat "$tmp/bf16.out")"
bf16_acc=$(awk '$1 == "val_acc" {print $2}' "$tmp/bf16.out")
awk -v a="${bf16_acc:-0}" 'BEGIN {exit !(a > 0.75)}' || fail "bf16-mixed on virtual_npu: val_acc '$bf16_acc' <= 0.75"

# Bad input exits 2 before training, with one error line that says what to fix.
expect_usage_error() {  # expect_usage_error <stderr fragment> <env assignment or -> <flags>...
  local fragment=$1 assignment=$2
  shift 2
  local err code
  if [[ $assignment == - ]]; then
    err=$($fit --enable_progress_bar=false --default_root_dir="$tmp/bad" "$@" 2>&1 >/dev/null)
  else
    err=$(env "$assignment" $fit --enable_progress_bar=false --default_root_dir="$tmp/bad" "$@" 2>&1 >/dev/null)
  fi
  code=$?
  [[ $code -eq 2 ]] || { fail "fit $assignment $* exited $code, wanted 2: $err"; return; }
  grep -q "^error: " <<<"$err" || fail "fit $assignment $*: no 'error: ' line in: $err"
  grep -qF -- "$fragment" <<<"$err" || fail "fit $assignment $*: '$fragment' not in: $err"
}
expect_usage_error "3 virtual_npu devices requested, but only 2 are visible (VIRTUAL_NPU_DEVICES=unset (2 devices))" \
  - --accelerator=virtual_npu --devices=3
expect_usage_error "VIRTUAL_NPU_PRIORITY='high' is not an integer" VIRTUAL_NPU_PRIORITY=high --accelerator=virtual_npu
expect_usage_error "VIRTUAL_NPU_DEVICES='0' is not a device count" VIRTUAL_NPU_DEVICES=0 --accelerator=vnpu

# The listing shows it beside the built-in ones, with its allocator's statistics.
listing=$($accelerators --stats 2>&1) || fail "tools/accelerators --stats exited $?"
grep -qE '^virtual_npu +vnpu +-10  yes +1  ' <<<"$listing" || fail "virtual_npu is not listed as available: $listing"
for key in memory_allocated_bytes memory_allocated_peak_bytes memory_active_blocks cpu_fallback_calls; do
  grep -qE "^ +$key +[0-9]" <<<"$listing" || fail "--stats printed no $key for virtual_npu"
done

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "virtual_npu end-to-end checks passed (parameters $cpu_sha on cpu and virtual_npu)"
