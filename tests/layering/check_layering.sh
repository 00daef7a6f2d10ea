#!/usr/bin/env bash
# Checks Kiln's layering rules on the output of `bazel query deps(...)` (as genquery writes it) and on source files.
#
#   check_layering.sh deps  <name> <deps-file> <forbidden-package-prefix>...
#       fails if any label in <deps-file> is inside one of the forbidden packages (e.g. //backends). A prefix that
#       ends in ':' (e.g. //trainer:) forbids the targets of that package only, not of its subpackages.
#   check_layering.sh names <words-file> <source>...
#       fails if a source file mentions any word of <words-file> (one per line) outside comments, case-insensitively.
#
# Exit status: 0 clean, 1 a violation (each is printed), 2 bad usage.
set -euo pipefail

usage() {
  echo "usage: $0 deps <name> <deps-file> <prefix>... | $0 names <words-file> <source>..." >&2
  exit 2
}

check_deps() {
  local name=$1 deps=$2
  shift 2
  local failed=0 prefix
  for prefix in "$@"; do
    # A label is inside a package if it is the package itself, a subpackage, or a target in it.
    local hits pattern="^${prefix}(/|:|$)"
    [[ "$prefix" == *: ]] && pattern="^${prefix}"
    hits=$(grep -E "$pattern" "$deps" || true)
    if [[ -n "$hits" ]]; then
      echo "layering violation: $name depends on ${prefix}:"
      echo "$hits" | sed 's/^/  /'
      failed=1
    fi
  done
  return $failed
}

check_names() {
  local words=$1
  shift
  local failed=0 word file
  while IFS= read -r word; do
    [[ -z "$word" ]] && continue
    for file in "$@"; do
      # Drop // comments and the lines of /* */ blocks before looking.
      local hits
      hits=$(sed -e 's|//.*$||' -e '/\/\*/,/\*\//d' "$file" | grep -n -i -w -- "$word" || true)
      if [[ -n "$hits" ]]; then
        echo "layering violation: $file names the backend '$word':"
        echo "$hits" | sed 's/^/  /'
        failed=1
      fi
    done
  done < "$words"
  return $failed
}

[[ $# -ge 1 ]] || usage
mode=$1
shift
case "$mode" in
  deps) [[ $# -ge 3 ]] || usage; check_deps "$@" ;;
  names) [[ $# -ge 2 ]] || usage; check_names "$@" ;;
  *) usage ;;
esac
