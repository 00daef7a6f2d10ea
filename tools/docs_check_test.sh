#!/usr/bin/env bash
# tools/docs_check.py on a small repository of its own (--root): a page that names only what exists passes, and each
# page with one fault of each kind (a path, a label, a label a macro would make, a fit flag on a fit command line, a
# flag alone that no program has, a measured figure without its date or program, a broken link, a split table) fails
# with the line that names it. The real pages are checked by .ci/run, which has the whole checkout.
set -uo pipefail
check=$PWD/tools/docs_check.py
repo=${TEST_TMPDIR:-$(mktemp -d)}/repo
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

mkdir -p "$repo"/{hal,trainer/cli,tools,tests/fuzz,docs}
touch "$repo/BUILD" "$repo/hal/accelerator.h" "$repo/hal/registry.h"
printf 'cc_library(\n    name = "hal",\n)\n\ncc_test(\n    name = "registry_test",\n)\n' >"$repo/hal/BUILD"
printf 'load("//tests/fuzz:fuzz.bzl", "kiln_fuzz_target")\n\nkiln_fuzz_target(\n    name = "devices",\n)\n' \
  >"$repo/tests/fuzz/BUILD"
printf 'alias(\n    name = "fit",\n)\n' >"$repo/trainer/BUILD"
printf 'KILN_TRAINER_OPTION(loop, int, max_epochs, 10, kTrainer, "max_epochs",\n                    "Epochs.")\n%s\n' \
  '#include "trainer/strategies/fsdp_options.inc"' >"$repo/trainer/trainer_options.inc"
# A strategy's own table, which the option table includes: its rows are (type, flag, ...).
mkdir -p "$repo/trainer/strategies"
printf 'KILN_FSDP_OPTION(std::string, sharding_strategy, sharding_strategy, "FULL_SHARD", "s", "Help.")\n' \
  >"$repo/trainer/strategies/fsdp_options.inc"
printf 'ABSL_FLAG(std::string, data, "synthetic", "The data.");\n' >"$repo/trainer/cli/data_flags.cc"
printf 'case "$1" in\n  --cuda) cuda=true ;;\nesac\n' >"$repo/tools/setup.sh"

cat >"$repo/docs/good.md" <<'PAGE'
# Good

`hal/accelerator.h`, `hal/{accelerator,registry}.h`, `hal/*.h`, `tools/setup.sh`, `//hal:registry_test`, `//hal`,
`@kiln//trainer:fit`, `//tests/fuzz:devices_corpus_test`, `//tests/fuzz:<name>_corpus_test`, `//hal/...`,
`@acme//:anything`, `acme/BUILD`, `lightning_logs/version_0`, `--max_epochs=3`, `--data`, `--cuda`, `--config=cuda`,
`--sharding_strategy=NO_SHARD`,
[a link](good.md#good).

    bazel run //trainer:fit -- --max_epochs=2 --data=my.csv
    tools/setup.sh --cuda

A step took 12 ms on 2026-12-05, and 14 ms by `//hal:registry_test`. A limit of 4 MiB needs no date.

The table below was measured by `tools/setup.sh`:

| run | time |
| --- | --- |
| one | 3 s |
PAGE

# expect_fault <page text> <what the problem line must say>
n=0
expect_fault() {
  n=$((n + 1))
  local page="docs/bad_$n.md"
  printf '# Bad\n\n%s\n' "$1" >"$repo/$page"
  local out status
  out=$(python3 "$check" --root="$repo" "$page")
  status=$?
  [[ $status -eq 1 ]] || fail "$page ($1): exit $status, not 1: $out"
  grep -qx "1 files, 1 problem(s)" <<<"$out" || fail "$page ($1): not exactly one problem: $out"
  grep "^$page:[0-9]*: " <<<"$out" | grep -qF -- "$2" || fail "$page ($1): no '$page:LINE: $2' in: $out"
}

out=$(python3 "$check" --root="$repo" docs/good.md)
[[ $? -eq 0 ]] || fail "docs/good.md is refused: $out"
expect_fault '`hal/nope.h`' "path hal/nope.h does not exist"
expect_fault '`hal/{accelerator,nope}.h`' "path hal/{accelerator,nope}.h does not exist"
expect_fault '`//hal:nope_test`' "label //hal:nope_test: hal/BUILD declares no nope_test"
expect_fault '`@kiln//trainer:fitt`' "label @kiln//trainer:fitt: trainer/BUILD declares no fitt"
expect_fault '`//nopkg:x`' "label //nopkg:x: there is no package nopkg"
expect_fault '`tests/fuzz:devices_fuzz_test`' "label tests/fuzz:devices_fuzz_test: tests/fuzz/BUILD declares no"
expect_fault '`bazel run //trainer:fit -- --max_epoch=3`' "fit has no flag --max_epoch"
expect_fault '`fit --cuda`' "fit has no flag --cuda"
expect_fault '`--max_epochz=3`' "--max_epochz is a flag of neither fit nor another program here"
expect_fault 'A step took 12 ms.' "12 ms: a measured figure that names neither its date nor the program"
expect_fault $'Measured by hand:\n\n| run | time |\n| --- | --- |\n| one | 3 s |' \
  "3 s: a measured figure"
expect_fault '[a link](nope.md)' "link to nope.md"

if ((failures > 0)); then echo "$failures check(s) failed"; exit 1; fi
echo "PASS: docs_check.py passes the good page and names each of $n faults"
