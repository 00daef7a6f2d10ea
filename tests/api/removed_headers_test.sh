#!/usr/bin/env bash
# Every public header of a release that is gone (tests/api/releases.bzl, REMOVED) is said gone in CHANGELOG.md, with
# the words releases.bzl quotes: a header does not disappear from a release's promise silently.
set -uo pipefail
failures=0
while IFS=$'\t' read -r header fragment; do
  if grep -qF -- "$fragment" CHANGELOG.md; then
    echo "ok: $header: CHANGELOG.md says \"$fragment\""
  else
    echo "FAIL: $header is gone, but CHANGELOG.md does not say \"$fragment\""
    failures=$((failures + 1))
  fi
  [[ -e $header ]] && { echo "FAIL: $header is listed as removed but is still there"; failures=$((failures + 1)); }
done < <(python3 - tests/api/releases.bzl <<'PY'
import sys
scope = {}
exec(open(sys.argv[1]).read(), scope)
for header, fragment in scope["REMOVED"].items():
    print(f"{header}\t{fragment}")
PY
)
if ((failures > 0)); then echo "$failures check(s) failed"; exit 1; fi
echo "PASS: every removed public header is in the CHANGELOG"
