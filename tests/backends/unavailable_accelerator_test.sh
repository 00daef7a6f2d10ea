#!/usr/bin/env bash
# Drives the real //trainer:fit binary with --accelerator set to each built-in hardware backend that
# //tools:accelerators lists as unavailable here: it must exit 2 before training, with one `error: ` line that gives
# the backend's reason and lists the accelerators that are available.
set -uo pipefail
fit=trainer/cli/fit
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

listing=$(tools/accelerators) || { echo "FAIL: tools/accelerators exited $?"; exit 1; }
echo "$listing"
# Rows start with the name; "why not:" rows are indented. Columns: NAME ALIASES PRIORITY AVAILABLE DEVICES ...
available=$(awk 'NR > 1 && $0 !~ /^ / && $4 == "yes" {print $1}' <<<"$listing" | sort | paste -sd, - | sed 's/,/, /g')
[[ -n "$available" ]] || fail "tools/accelerators lists nothing available (cpu always is)"

checked=0
for flag in cuda gpu hpu; do
  name=$flag
  [[ $flag == gpu ]] && name=cuda
  row=$(awk -v n="$name" '$1 == n' <<<"$listing")
  [[ -n "$row" ]] || { fail "$name is not listed by tools/accelerators"; continue; }
  if [[ $(awk '{print $4}' <<<"$row") == yes ]]; then
    echo "skip: $name is available on this machine, so --accelerator=$flag is not an error here"
    continue
  fi
  reason=$(awk -v n="$name" 'found {sub(/^ +why not: /, ""); print; exit} $1 == n {found = 1}' <<<"$listing")
  [[ -n "$reason" ]] || { fail "no 'why not:' line under $name"; continue; }
  checked=$((checked + 1))
  err=$($fit --accelerator=$flag --max_epochs=1 --enable_progress_bar=false 2>&1 >/dev/null)
  code=$?
  [[ $code -eq 2 ]] || fail "fit --accelerator=$flag exited $code, wanted 2"
  grep -q "^error: " <<<"$err" || fail "fit --accelerator=$flag: no 'error: ' line in: $err"
  want="accelerator '$name' can not run on your system since the accelerator is not available ($reason)."
  grep -qF -- "$want" <<<"$err" || fail "fit --accelerator=$flag: '$want' not in: $err"
  want="The following accelerator(s) is available and can be passed into \`accelerator\` argument of \`Trainer\`: $available."
  grep -qF -- "$want" <<<"$err" || fail "fit --accelerator=$flag: '$want' not in: $err"
done

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "unavailable accelerator checks passed ($checked checked)"
