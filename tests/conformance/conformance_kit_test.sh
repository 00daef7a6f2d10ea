#!/usr/bin/env bash
# The conformance suite must fail what breaks the contract: run against "conformance_broken" (broken_accelerator.cc),
# every one of its checks fails; against "conformance_meta", whose devices cannot compute, the set-up and training
# checks fail; against a name nobody registered, every check fails saying so; bad arguments exit 2. Against one
# fault each (an all-gather in the wrong rank order, a broadcast that never returns, a device count that lies) the
# suite and the kit's fsdp training fail, naming the fault, within their own time limit; a declared lack (no
# reduce-scatter) skips its checks saying so. A suite that stopped checking something cannot pass silently.
#
# Each suite below runs as a test of Bazel's size small would (TEST_TIMEOUT=60): its bounds are shares of that.
set -uo pipefail
export TEST_TIMEOUT=60
suite=tests/conformance/broken_conformance
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

out=$($suite --accelerator=conformance_broken 2>&1)
code=$?
echo "$out" | grep -E '^\[  (FAILED|PASSED|SKIPPED) ' | sort -u
[[ $code -eq 1 ]] || fail "the suite exited $code against the broken accelerator, wanted 1"
checks=(IsRegisteredUnderItsNameAndAliases CountingAndDeclarationsNeverThrow ParsingRejectsBadInputWithClearErrors
  AutoAndOneParseToTheCountedDevices IndicesStayWithinTheDevicesPresent ParallelDevicesMatchTheParsedSet
  SetupAndTeardownRepeat ConstMethodsAnswerAlikeFromSeveralThreads StatisticsAreWellFormed PeakFlopsArePositiveOrUnknown
  TrainingStepsMatchTheCpu
  EveryCountedDeviceHoldsATensor CollectivesGiveTheRightValuesAcrossProcesses AMissingPeerFailsWithinTheTimeout)
for check in "${checks[@]}"; do
  grep -qE "^\[  FAILED  \] ConformanceTest\.$check \(" <<<"$out" || fail "$check did not fail against the broken accelerator"
done
ran=$(grep -cE '^\[ RUN      \] ConformanceTest\.' <<<"$out")
# RegistersBesideEveryLinkedBackend is shown failing by the clashing backend below.
[[ $ran -eq $((${#checks[@]} + 1)) ]] || fail "the suite ran $ran checks; this test knows $((${#checks[@]} + 1)) (update the list)"
for why in "name() must return the registered name" "AutoDeviceCount changed between two calls" \
  "lists a precision twice" "accepted as 0" "ParallelDevices must give one device per parsed index" \
  "set up twice" "statistic key 'Bad Key' is not lower_snake_case" "is not this accelerator's device" \
  "devices=2 was accepted as 0 with 1 device(s) present" "AutoDeviceCount answered differently from another thread" \
  "beyond the 1 device(s) present" "the backend's allreduce computes wrongly" \
  "the backend must bound joining and every collective by CollectiveOptions::timeout" "PeakFlops gave -1"; do
  grep -qF -- "$why" <<<"$out" || fail "no '$why' in the suite's output"
done

# A device that keeps every rule but cannot compute fails the checks that use it, and only those.
out=$($suite --accelerator=conformance_meta 2>&1)
code=$?
echo "$out" | grep -E '^\[  (FAILED|PASSED|SKIPPED) ' | sort -u
[[ $code -eq 1 ]] || fail "the suite exited $code against the meta accelerator, wanted 1"
for check in SetupAndTeardownRepeat TrainingStepsMatchTheCpu EveryCountedDeviceHoldsATensor \
  CollectivesGiveTheRightValuesAcrossProcesses; do
  grep -qE "^\[  FAILED  \] ConformanceTest\.$check \(" <<<"$out" || fail "$check did not fail on meta devices"
done
grep -qE '^\[  PASSED  \] 11 tests\.' <<<"$out" || fail "the other eleven checks did not pass on the meta accelerator"

# A backend that took the built-in name "cpu", linked beside the built-in backends: the program runs (no abort
# before main), and the registration check fails naming both source files. Only that check is run: the others test
# the real cpu backend, which cpu_conformance_test covers.
out=$(tests/conformance/clashing_conformance --accelerator=cpu \
  --gtest_filter=ConformanceTest.RegistersBesideEveryLinkedBackend 2>&1)
code=$?
[[ $code -eq 1 ]] || fail "the suite exited $code with a clashing backend, wanted 1"
grep -qE '^\[  FAILED  \] ConformanceTest\.RegistersBesideEveryLinkedBackend \(' <<<"$out" ||
  fail "RegistersBesideEveryLinkedBackend did not fail with a clashing backend"
# Which of the two registers first is the linker's choice; the message names both either way.
for why in "accelerator name 'cpu' (registered in " "is already taken by accelerator 'cpu' (registered in " \
  "tests/conformance/clashing_accelerator.cc" "backends/cpu/cpu_accelerator.cc" "KILN_REGISTER_ACCELERATOR line"; do
  grep -qF -- "$why" <<<"$out" || fail "no '$why' in the suite's output with a clashing backend"
done

out=$($suite --accelerator=nobody_registered_this 2>&1)
code=$?
[[ $code -eq 1 ]] || fail "the suite exited $code for an unregistered name, wanted 1"
grep -qF "unknown accelerator 'nobody_registered_this'" <<<"$out" || fail "no 'unknown accelerator' message: $out"
grep -qF "with alwayslink = True" <<<"$out" || fail "the unregistered case does not point at alwayslink"

err=$($suite 2>&1)
[[ $? -eq 2 ]] || fail "the suite without --accelerator did not exit 2"
grep -qF -- "--accelerator=<registered name> is required" <<<"$err" || fail "no usage error without --accelerator: $err"
err=$($suite --accelerator=cpu --colour 2>&1)
[[ $? -eq 2 ]] || fail "the suite with an unknown argument did not exit 2"
# A plugin that cannot be loaded stops the suite before any check, with the loader's error.
err=$($suite --accelerator=test_indexed --accelerator_plugin=hal/plugin/libtest_plugin_wrong_major.so 2>&1)
[[ $? -eq 2 ]] || fail "the suite with an incompatible plugin did not exit 2"
# The test plugin reports the header's major version plus one, with its minor version.
grep -qE "error: accelerator plugin 'hal/plugin/libtest_plugin_wrong_major.so' was built for plugin API version 2\.[0-9]+, \
but this Kiln implements 1\.[0-9]+: major versions must be equal" <<<"$err" || fail "no loader error for an incompatible plugin: $err"

# One fault each. within BOUND SECONDS COMMAND...: runs it, keeping its output in $out and exit status in $code, and
# fails the check when it took BOUND seconds or more (the suite's own bounds must end it first).
within() {
  local bound=$1 start elapsed
  shift
  start=$(date +%s.%N)
  out=$("$@" 2>&1)
  code=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  echo "  $*: exit $code after $elapsed s"
  (( $(echo "$elapsed < $bound" | bc) )) || fail "$* took $elapsed s, more than its $bound s"
}
echo "== a device count that lies"
within 60 $suite --accelerator=conformance_liar --gtest_filter=ConformanceTest.EveryCountedDeviceHoldsATensor
[[ $code -eq 1 ]] || fail "the suite exited $code against a lying device count, wanted 1"
for why in "conformance_liar counts 4 device(s), but conformance_liar:2 (on meta) cannot hold a 1 KiB tensor" \
  "its device count lies"; do
  grep -qF -- "$why" <<<"$out" || fail "no '$why' in: $(grep -A3 FAILED <<<"$out" | head -5)"
done
echo "== an all-gather in the wrong rank order"
within 60 $suite --accelerator=conformance_gather --gtest_filter=ConformanceTest.CollectivesGiveTheRightValuesAcrossProcesses
[[ $code -eq 1 ]] || fail "the suite exited $code against a wrong all-gather order, wanted 1"
grep -qF "the backend's _allgather_base computes wrongly" <<<"$out" || fail "no wrong _allgather_base in: $(tail -5 <<<"$out")"
within 60 tests/conformance/broken_fsdp_conformance --accelerator=conformance_gather
[[ $code -eq 1 ]] || fail "the fsdp training exited $code against a wrong all-gather order, wanted 1 (a failure, not a hang)"
grep -qE "fsdp did not end where ddp ends|the ranks of fsdp ended with different models" <<<"$out" ||
  fail "the fsdp training's failure does not say fsdp went wrong: $(tail -5 <<<"$out")"
echo "== a broadcast that never returns on rank 1"
within 60 $suite --accelerator=conformance_hang --gtest_filter=ConformanceTest.CollectivesGiveTheRightValuesAcrossProcesses
[[ $code -eq 1 ]] || fail "the suite exited $code against a broadcast that never returns, wanted 1"
# Rank 0 names the step that failed and where rank 1 is; rank 1's own line names the step it never left.
grep -qE "rank 1 of [24] (did not finish within [0-9]+ s: it never left|was stopped after another rank had failed, in) broadcast \(from rank 0\)" <<<"$out" ||
  fail "rank 1's step is not named: $(grep -A2 'rank 1 of' <<<"$out" | head -4)"
grep -qE "error: (broadcast \(from rank 0\)|allgather|_allgather_base|_reduce_scatter_base|barrier) threw on rank 0 of [24]" <<<"$out" ||
  fail "rank 0's error does not name its collective: $(grep 'error:' <<<"$out" | head -3)"
echo "== a declared lack: no reduce-scatter"
within 60 $suite --accelerator=conformance_lacking --gtest_filter=ConformanceTest.CollectivesGiveTheRightValuesAcrossProcesses
[[ $code -eq 0 ]] || fail "the suite exited $code against a backend that declares no reduce-scatter, wanted 0: $(tail -5 <<<"$out")"
grep -qF "conformance_lacking declares its collective backend has no _reduce_scatter_base" <<<"$out" ||
  fail "the skip is not said: $(tail -5 <<<"$out")"
within 60 tests/conformance/broken_fsdp_conformance --accelerator=conformance_lacking
[[ $code -eq 0 ]] || fail "fsdp on a backend without reduce-scatter exited $code, wanted 0 (it all-reduces): $(tail -5 <<<"$out")"
grep -qE '^\[  PASSED  \] 1 test\.' <<<"$out" && ! grep -q '^\[  SKIPPED' <<<"$out" ||
  fail "fsdp on a backend without reduce-scatter did not train (it must all-reduce, not skip): $(tail -5 <<<"$out")"

# The kit's fsdp training (<name>_fsdp) fails a backend whose flat reduce-scatter is wrong, where ddp (all-reduce)
# trains right.
out=$(tests/conformance/broken_fsdp_conformance --accelerator=conformance_scatter 2>&1)
code=$?
echo "$out" | grep -E '^\[  (FAILED|PASSED|SKIPPED) ' | sort -u
[[ $code -eq 1 ]] || fail "the fsdp training exited $code against a wrong reduce-scatter, wanted 1"
grep -qF "fsdp did not end where ddp ends" <<<"$out" || fail "no 'fsdp did not end where ddp ends' in: $(tail -5 <<<"$out")"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "the conformance suite fails every broken rule"
