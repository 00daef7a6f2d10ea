#!/usr/bin/env bash
# tools/bench_report.py --from the saved outputs in tools/testdata/bench_report (smoke runs of step_bench,
# checkpoint_bench and python_step.py, and a format sample of bench_instructions.sh's output) into a copy of
# docs/performance.md: every block gets its table, issue #41's targets are judged from the numbers (one number changed
# in a copy of a fixture turns met into missed, or missed into met), the text outside the blocks stays as it was, and
# a page without the markers is refused untouched.
set -uo pipefail
report=$PWD/tools/bench_report.py
fixtures=$PWD/tools/testdata/bench_report
original=$PWD/docs/performance.md
python=/usr/bin/python3
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

# outside <page>: the page without what lies between each block's markers (the markers kept).
outside() { sed '/^<!-- bench_report:[a-z]* begin -->$/,/^<!-- bench_report:[a-z]* end -->$/{/^<!-- bench_report:/!d}' "$1"; }
# block <name> <page>: the lines of one block.
block() { sed -n "/^<!-- bench_report:$1 begin -->\$/,/^<!-- bench_report:$1 end -->\$/p" "$2"; }
# judged <name> <page> <row's first cell>: that row's judgement (met, **missed**), the second-to-last cell of the step
# and checkpoint tables' rows, the last of the instruction table's.
judged() {
  block "$1" "$2" | awk -F' \\| ' -v label="| $3" -v last="$([[ $1 == instructions ]] && echo 1 || echo 0)" '
    $1 == label { cell = last ? $NF : $(NF - 1); sub(/ \|$/, "", cell); print cell; exit }'
}
# expect_judged <name> <page> <row> <judgement>
expect_judged() {
  local got
  got=$(judged "$1" "$2" "$3")
  [[ $got == "$4" ]] || fail "$2: the $1 row '$3' is judged '$got', not '$4'"
}
# same_width <page>: every table row in the blocks has as many cells as its header.
same_width() {
  awk '/^<!-- bench_report:[a-z]* begin -->$/ { inside = 1 } /^<!-- bench_report:[a-z]* end -->$/ { inside = 0 }
       inside && /^\|/ { n = gsub(/ \| /, "&"); if (!header) header = n; else if (n != header) { print FILENAME ": " $0; bad = 1 } }
       inside && !/^\|/ { header = 0 }
       END { exit bad }' "$1" || fail "$1: a table row's cells do not match its header's"
}

cp "$original" page.md
$python "$report" --from "$fixtures" --page page.md >run.out 2>&1 || { cat run.out; fail "bench_report.py exited $?"; }
for name in step python checkpoint instructions; do
  block "$name" page.md | grep -q "^| measurement \|^| workload " || fail "no table in the $name block"
done
block step page.md | grep -q '^| tiny MLP, callbacks off (Kiln.s fused optimizer) | [0-9,.]* | [0-9,.]* | [0-9,.]* | [0-9,.]* | [0-9,.]* | [0-9,.]* | [0-9,.]* |' ||
  fail "the step table has no tiny row with Kiln's, both loops', Python's three and Lightning's figures"
block step page.md | grep -q "started from step_bench's initial parameters" || fail "the fingerprints were not compared"
block step page.md | grep -q "^\*\*Smoke run\*\*" || fail "the smoke run's figures are not marked as such"
block step page.md | grep -q "KILN_BENCH_SMOKE=1 bazel-bin/tests/bench/step_bench" || fail "no command in the step block"
block step page.md | grep -q "LibTorch 2\.[0-9]*" || fail "no LibTorch version in the step block"
block instructions page.md | grep -q "not recorded" || fail "the instructions block claims a date or machine"
block instructions page.md | tr '\n' ' ' | grep -q "FORMAT SAMPLE, not a measurement" ||
  fail "the format sample's comment is not quoted in the instructions block"
same_width page.md
[[ "$(outside page.md)" == "$(outside "$original")" ]] || fail "text outside the blocks changed: $(diff <(outside "$original") <(outside page.md) | head -5)"
[[ $(grep -c 'Not generated yet' page.md) == 0 ]] || fail "a block kept its placeholder"

# The judgements, as the fixtures' numbers give them.
expect_judged step page.md "tiny MLP, callbacks off (Kiln's fused optimizer)" "**missed**"
expect_judged checkpoint page.md "checkpoint read, validated" "met"
expect_judged instructions page.md "tiny MLP, \`kiln::FusedSGD\`, against the fused loop" "met"
expect_judged instructions page.md "tiny MLP, a checkpoint every 10 steps over none, every thread" "**missed**"
expect_judged instructions page.md "the same, names built in each call, over the same names built and not logged" "met"

# Written again from the same outputs, the page is the same.
cp page.md first.md
$python "$report" --from "$fixtures" --page page.md >run.out 2>&1 || fail "the second run exited $?"
cmp -s page.md first.md || fail "a second run from the same outputs changed the page: $(diff first.md page.md | head -5)"

# One number changed in a copy of each fixture: the judgement follows it.
cp -rL "$fixtures" changed  # -L: the runfiles are links to read-only files.
$python - changed/step_bench.json changed/checkpoint_bench.json <<'PY' || fail "could not change the fixtures"
import json, sys
for path, family, counter, value in ((sys.argv[1], "BM_TinyCallbacksOff", "kiln_over_fused_raw", 1.04),
                                     (sys.argv[2], "BM_CheckpointRead", "kiln_over_raw_throughput", 0.9)):
    data = json.load(open(path))
    for entry in data["benchmarks"]:
        if entry["run_name"].split("/")[0] == family:
            entry[counter] = value
    json.dump(data, open(path, "w"), indent=2)
PY
sed -i 's/^kiln_fused instructions_per_step .*/kiln_fused instructions_per_step 660000/' changed/bench_instructions.txt
cp first.md page.md
$python "$report" --from changed --page page.md >run.out 2>&1 || { cat run.out; fail "bench_report.py on the changed copy exited $?"; }
expect_judged step page.md "tiny MLP, callbacks off (Kiln's fused optimizer)" "met"
expect_judged checkpoint page.md "checkpoint read, validated" "**missed**"
expect_judged instructions page.md "tiny MLP, \`kiln::FusedSGD\`, against the fused loop" "**missed**"
expect_judged instructions page.md "tiny MLP, a checkpoint every 10 steps over none, every thread" "**missed**"
[[ "$(outside page.md)" == "$(outside "$original")" ]] || fail "text outside the blocks changed on the second page"

# --only rewrites its blocks and leaves the others as they were.
cp first.md page.md
$python "$report" --from changed --only checkpoint --page page.md >run.out 2>&1 || fail "--only checkpoint exited $?"
for name in step python instructions; do
  [[ "$(block "$name" page.md)" == "$(block "$name" first.md)" ]] || fail "--only checkpoint changed the $name block"
done
expect_judged checkpoint page.md "checkpoint read, validated" "**missed**"

# Without the Python with Lightning, the run says python was skipped, and the step table says so.
mkdir skipped
cp "$fixtures"/step_bench.json skipped/
echo '{"python": {"date": "2026-01-01 00:00 UTC", "skipped": "no Python with Lightning at /nowhere/python"}}' \
  >skipped/meta.json
cp "$original" page.md
$python "$report" --from skipped --only step,python --page page.md >run.out 2>&1 || fail "the skipped run exited $?"
block python page.md | grep -q "Skipped: no Python with Lightning at /nowhere/python" || fail "no skip note in the python block"
block step page.md | grep -q "Python's figures: skipped" || fail "no skip note in the step block"

# A page without the markers is refused, unchanged, before anything runs.
printf '# A page\n\nNo markers.\n' >bare.md
cp bare.md bare_before.md
$python "$report" --from "$fixtures" --page bare.md >run.out 2>&1
status=$?
[[ $status == 2 ]] || fail "a page without markers: exit $status, not 2"
grep -q "bench_report:step begin" run.out || fail "the refusal does not name the marker: $(cat run.out)"
cmp -s bare.md bare_before.md || fail "a page without markers was changed"

# An output that is not what the program prints is an error that names the file and line.
mkdir broken
echo "kiln instructions_per_step lots" >broken/bench_instructions.txt
cp first.md page.md
$python "$report" --from broken --only instructions --page page.md >run.out 2>&1
status=$?
[[ $status == 1 ]] || fail "a broken output: exit $status, not 1"
grep -q "bench_instructions.txt:1: " run.out || fail "the error does not name the file and line: $(cat run.out)"
cmp -s page.md first.md || fail "a broken output changed the page"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: bench_report.py wrote every block from the saved outputs, judged the targets from the numbers, and left the" \
  "rest of the page as it was"
