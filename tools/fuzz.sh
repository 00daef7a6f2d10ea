#!/usr/bin/env bash
# Runs Kiln's libFuzzer targets (tests/fuzz) for a while each and reports executions and findings.
#
#   tools/fuzz.sh                                 # every target, 600 s each, two at a time
#   tools/fuzz.sh --seconds=60 devices            # one target for a minute
#   tools/fuzz.sh --jobs=1 --seconds=600 checkpoint_reader cluster_environment
#
# Builds with --config=fuzz (.bazelrc: clang from Debian, libFuzzer, ASan, UBSan) in an output base of its own
# (~/.cache/kiln/fuzz-output-base-<hash of this folder>), so the default build's analysis cache survives. Each target's working corpus
# lives in ~/.cache/kiln/fuzz/<target>/corpus (it grows from run to run and starts from tests/fuzz/corpus/<target>);
# crashes, leaks, timeouts and out-of-memory inputs go to ~/.cache/kiln/fuzz/<target>/findings/. Copy a finding into
# tests/fuzz/corpus/<target>/ once it is fixed: `bazel test //tests/fuzz:<target>_corpus_test` then replays it.
#
# Exit status: 0 when no target found anything, 1 otherwise (or when a build fails). Needs clang and
# libclang-rt-14-dev (libFuzzer and the sanitizer runtimes); CI does not run this, only the corpus replays.
set -uo pipefail
cd "$(dirname "$0")/.."

# Every target, with its extra libFuzzer options. Adding a target: one line here.
declare -A options=(
  [devices]="-max_len=256"
  [flag_values]="-max_len=512 -dict=tests/fuzz/flag_values.dict"
  [config_file]="-max_len=2048 -dict=tests/fuzz/config_file.dict"
  [cluster_environment]="-max_len=4096 -dict=tests/fuzz/cluster_environment.dict"
  [checkpoint_reader]="-max_len=65536 -rss_limit_mb=4096 -detect_leaks=0"
  [csv_table]="-max_len=4096 -dict=tests/fuzz/csv_table.dict"
  [csv_stream]="-max_len=4096 -dict=tests/fuzz/csv_table.dict"
  [plugin_tables]="-max_len=1024"
  [run_folder]="-max_len=1024"
)
# Sanitizer options per target. checkpoint_reader unwinds exactly by default (see its source: a LibTorch leak is
# suppressed by function name), which makes it ten times slower; it fuzzes with the fast unwinder and without leak
# checks, and its working corpus is then replayed once with both (run_target below).
declare -A sanitizer_options=(
  [checkpoint_reader]="fast_unwind_on_malloc=1:detect_leaks=0"
)
replay_for_leaks=(checkpoint_reader)
all=(devices flag_values config_file cluster_environment checkpoint_reader csv_table csv_stream plugin_tables run_folder)

seconds=600
jobs=2
targets=()
for argument in "$@"; do
  case "$argument" in
    --seconds=*) seconds=${argument#--seconds=} ;;
    --jobs=*) jobs=${argument#--jobs=} ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "tools/fuzz.sh: unknown option '$argument' (see --help)" >&2; exit 2 ;;
    *)
      if [[ -z "${options[$argument]+set}" ]]; then
        echo "tools/fuzz.sh: unknown target '$argument'; targets: ${all[*]}" >&2
        exit 2
      fi
      targets+=("$argument")
      ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=("${all[@]}")
command -v clang >/dev/null || { echo "tools/fuzz.sh: clang is missing: apt-get install clang libclang-rt-14-dev" >&2; exit 1; }

output_base=${KILN_FUZZ_OUTPUT_BASE:-$HOME/.cache/kiln/fuzz-output-base-$(pwd | md5sum | cut -c1-8)}
bazel_fuzz() { bazel --output_base="$output_base" "$@"; }
labels=()
for target in "${targets[@]}"; do labels+=("//tests/fuzz:${target}_fuzzer"); done
echo "building ${labels[*]} with --config=fuzz" >&2
bazel_fuzz build --config=fuzz "${labels[@]}" 2>&1 | grep -E '^(ERROR|FAILED)|error:' >&2
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "tools/fuzz.sh: the build failed" >&2; exit 1; }
bin=$(bazel_fuzz info --config=fuzz bazel-bin 2>/dev/null)

state=$HOME/.cache/kiln/fuzz
run_target() {
  local target=$1 dir=$state/$1
  mkdir -p "$dir/corpus" "$dir/findings"
  local log=$dir/last-run.log
  # Sanitizer options: a leak is a finding; symbolize in reports.
  ASAN_OPTIONS=detect_leaks=1:${sanitizer_options[$target]:-} UBSAN_OPTIONS=print_stacktrace=1 \
    "$bin/tests/fuzz/${target}_fuzzer" -max_total_time="$seconds" -timeout=20 -print_final_stats=1 \
    -artifact_prefix="$dir/findings/" ${options[$target]} "$dir/corpus" "tests/fuzz/corpus/$target" >"$log" 2>&1
  local code=$?
  if [[ $code -eq 0 && " ${replay_for_leaks[*]} " == *" $target "* ]]; then
    # Every input of the working corpus once more, with leak checks and exact stacks.
    ASAN_OPTIONS=detect_leaks=1 "$bin/tests/fuzz/${target}_fuzzer" -runs=0 -detect_leaks=1 -timeout=60 \
      -artifact_prefix="$dir/findings/" "$dir/corpus" "tests/fuzz/corpus/$target" >"$dir/last-leak-replay.log" 2>&1
    code=$?
    [[ $code -eq 0 ]] || cat "$dir/last-leak-replay.log" >>"$log"
  fi
  local executions corpus findings
  executions=$(sed -n -E 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -1)
  corpus=$(find "$dir/corpus" -type f | wc -l)
  findings=$(find "$dir/findings" -type f -newer "$log.start" 2>/dev/null | wc -l)
  printf '%-20s exit %d, %s executions in %s s, working corpus %d inputs, %d new finding(s)%s\n' "$target" "$code" \
    "${executions:-?}" "$seconds" "$corpus" "$findings" "$([[ $findings -gt 0 ]] && echo ": see $dir/findings")"
  [[ $code -eq 0 && $findings -eq 0 ]]
}

status=0
running=0
for target in "${targets[@]}"; do
  mkdir -p "$state/$target"
  touch "$state/$target/last-run.log.start"
  run_target "$target" &
  running=$((running + 1))
  if [[ $running -ge $jobs ]]; then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while [[ $running -gt 0 ]]; do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
