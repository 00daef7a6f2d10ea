#!/usr/bin/env bash
# kiln::Tuner in a user's program (tuner_program.cc).
#
# Out of device memory: the virtual NPU with VIRTUAL_NPU_MEMORY_LIMIT fails an allocation past the limit with the
# device's out-of-memory error, which scale_batch_size must treat as Lightning treats CUDA's (is_oom_error: that
# size does not fit) and not as a failure. The expectation is derived, not written down: one trial at batch size B
# (a probe, without a limit) holds at most peak(B) bytes; with the limit set to peak(B), B fits and B + 1 does not
# (the probe shows peak(B + 1) > peak(B)), so binsearch (margin 0) must end at B and power at the largest power of
# two from init_val 2 up to B; with the limit one byte lower, binsearch must end at B - 1 (peak(B - 1) fits under it).
#
# Two processes (DDP over Gloo on the CPU): lr_find runs on every rank, and every rank ends with rank zero's points,
# the same suggestion and the same learning rate set, as Lightning broadcasts them; scale_batch_size is refused on
# every rank with one clear error, as Lightning refuses distributed strategies; fit then trains on both.
set -uo pipefail
program=$PWD/tests/third_party/tuner_program
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

probe() {  # probe B: peak(B) in bytes
  "$program" probe virtual_npu "$1" 2>probe_$1.err | sed -n 's/^peak //p'
}
search() {  # search LIMIT MODE: the batch size found
  VIRTUAL_NPU_MEMORY_LIMIT=$1 "$program" search virtual_npu "$2" 2>search_$1_$2.err | sed -n 's/^size //p'
}

b=45
peak=$(probe $b)
above=$(probe $((b + 1)))
below=$(probe $((b - 1)))
if [[ -z $peak || -z $above || -z $below ]]; then
  fail "the probes gave no peak: $(tail -3 probe_$b.err)"
elif ((below < peak && peak < above)); then
  power=2
  while ((power * 2 <= b)); do power=$((power * 2)); done
  for run in "$peak binsearch $b" "$peak power $power" "$((peak - 1)) binsearch $((b - 1))"; do
    read -r limit mode want <<<"$run"
    got=$(search "$limit" "$mode")
    [[ $got == "$want" ]] ||
      fail "scale_batch_size($mode) under a limit of $limit bytes found '$got', wanted $want (peak($((b - 1)))=$below," \
        "peak($b)=$peak, peak($((b + 1)))=$above): $(grep -E 'tuner.cc|error' search_${limit}_$mode.err | tail -4)"
    grep -q "failed, trying batch size" search_${limit}_$mode.err ||
      fail "scale_batch_size($mode) under a limit of $limit bytes never ran out of memory"
  done
else
  fail "peak memory does not grow with the batch size: peak($((b - 1)))=$below, peak($b)=$peak, peak($((b + 1)))=$above"
fi
# A bad limit makes the device unavailable, naming the variable, before anything runs.
VIRTUAL_NPU_MEMORY_LIMIT=lots "$program" search virtual_npu power >/dev/null 2>bad.err &&
  fail "VIRTUAL_NPU_MEMORY_LIMIT=lots was accepted"
grep -q "VIRTUAL_NPU_MEMORY_LIMIT='lots'" bad.err || fail "the bad limit is not named: $(tail -2 bad.err)"

mkdir -p ddp
"$program" ddp ddp 2 2>ddp.err || fail "the 2-process program failed: $(grep -E '^E|error' ddp.err | tail -3)"
for rank in 0 1; do
  [[ -f ddp/rank_$rank.txt ]] || { fail "rank $rank wrote nothing"; continue; }
  grep -q "^scale_batch_size INVALID_ARGUMENT: Tuning the batch size is currently not supported with distributed" \
    ddp/rank_$rank.txt || fail "rank $rank: scale_batch_size was not refused: $(grep scale ddp/rank_$rank.txt)"
  grep -q "^fit ok" ddp/rank_$rank.txt || fail "rank $rank: fit after tuning: $(grep ^fit ddp/rank_$rank.txt)"
  suggestion=$(sed -n 's/^suggestion //p' ddp/rank_$rank.txt)
  [[ -n $suggestion && $suggestion != -1 && $suggestion == "$(sed -n 's/^lr //p' ddp/rank_$rank.txt)" ]] ||
    fail "rank $rank: lr_find's suggestion '$suggestion' is not the module's lr: $(grep ^lr ddp/rank_$rank.txt)"
done
points=$(grep -c '^point ' ddp/rank_0.txt)
((points > 10)) || fail "rank 0 has $points lr_find points"
diff <(grep -v '^fit' ddp/rank_0.txt) <(grep -v '^fit' ddp/rank_1.txt) >ranks.diff ||
  fail "the ranks' lr_find results differ (rank zero's must reach every rank): $(head -5 ranks.diff)"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: binsearch ends at the largest batch that fits the device's memory ($b under $peak bytes), power at $power;" \
  "lr_find agrees on 2 ranks and scale_batch_size is refused there"
