#!/usr/bin/env bash
# A user's workspace, built from the documentation's own text: the files and commands of docs/accelerators.md, "Your
# workspace" (each in a fenced block after a `<!-- user-workspace: NAME -->` line) are copied verbatim into a new
# folder, with /path/to/kiln replaced by this checkout, and the commands run there as a vendor would run them: the
# scaffold writes a backend, its conformance test runs, `fit` trains on it, and a program of the user's own trains.
#
# A second workspace then does the same with another backend (the same text with "acme" replaced by "zeta"), and
# prints how many of its actions the disk cache answered: everything but that backend should come from it
# (docs/accelerators.md, "Your workspace"; the timings are in docs/build-notes.md).
#
#   tools/user_workspace_check.sh [--keep]      (--keep leaves the folders and their output bases behind)
#
# A third workspace is a vendor's that adopts the LibTorch library it already ships, from docs/collectives.md's text
# ("Adopting the library you ship", blocks after `<!-- vendor-workspace: NAME -->`, with accelerators.md's .bazelrc):
# the library is Kiln's test double (tests/vendor_stack, built here first), its conformance test runs and fit trains
# on it with ddp.
#
# Exit status: 0 when the three workspaces build, test and train; 1 otherwise. CI runs it (.ci/run).
set -euo pipefail
kiln=$(cd "$(dirname "$0")/.." && pwd)
keep=0
[[ "${1:-}" == --keep ]] && keep=1
doc="$kiln/docs/accelerators.md"
root=$(mktemp -d /tmp/kiln-user-workspace.XXXXXX)

cleanup() {
  for ws in "$root"/*/; do
    [[ -f "$ws/WORKSPACE" ]] || continue
    if [[ $keep -eq 0 ]]; then (cd "$ws" && bazel clean --expunge >/dev/null 2>&1 || true); fi
    (cd "$ws" && bazel shutdown >/dev/null 2>&1 || true)
  done
  if [[ $keep -eq 0 ]]; then rm -rf "$root"; else echo "kept $root"; fi
}
trap cleanup EXIT

fail() {
  echo "user workspace check FAILED: $*" >&2
  exit 1
}

# The fenced block after `<!-- ${3:-user-workspace}: $1 -->` in ${2:-$doc}, without its fences.
block() {
  awk -v name="$1" -v marker="${3:-user-workspace}" '
    $0 == "<!-- " marker ": " name " -->" { found = 1; next }
    found == 1 && /^```/ { found = 2; next }
    found == 2 && /^```/ { exit }
    found == 2 { print }
  ' "${2:-$doc}"
}

names=$(sed -n -E 's/^<!-- user-workspace: (.+) -->$/\1/p' "$doc")
[[ -n "$names" ]] || fail "docs/accelerators.md has no <!-- user-workspace: NAME --> blocks"
grep -qx "commands" <<<"$names" || fail "docs/accelerators.md has no <!-- user-workspace: commands --> block"

# make_workspace DIR BACKEND: the documented files, with Kiln's path and the backend's name filled in.
make_workspace() {
  local dir=$1 backend=$2
  mkdir -p "$dir"
  local name
  while read -r name; do
    [[ "$name" == commands ]] && continue
    mkdir -p "$dir/$(dirname "$name")"
    block "$name" | sed -e "s|/path/to/kiln|$kiln|g" -e "s|acme|$backend|g" >"$dir/$name"
    [[ -s "$dir/$name" ]] || fail "docs/accelerators.md's block for $name is empty"
  done <<<"$names"
  block commands | sed -e "s|/path/to/kiln|$kiln|g" -e "s|acme|$backend|g" >"$dir/.readme_commands.sh"
}

# run_workspace DIR: runs the documented commands there; prints each bazel command's process summary.
run_workspace() {
  local dir=$1 log=$1/.readme_commands.log
  local start=$SECONDS
  echo "== $(basename "$dir"): the documented commands"
  sed 's/^/   $ /' "$dir/.readme_commands.sh"
  if ! (cd "$dir" && bash -euo pipefail .readme_commands.sh) >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    fail "$(basename "$dir"): a documented command failed (log above)"
  fi
  echo "   passed in $((SECONDS - start)) s"
  grep -aE '^INFO: [0-9]+ process(es)?:' "$log" | sed 's/^/   /' || true
}

make_workspace "$root/first" acme
run_workspace "$root/first"
grep -aq "Trained on acme (ddp" "$root/first/.readme_commands.log" ||
  fail "first: fit did not say it trained on acme under ddp"

make_workspace "$root/second" zeta
run_workspace "$root/second"
grep -aq "Trained on zeta (ddp" "$root/second/.readme_commands.log" ||
  fail "second: fit did not say it trained on zeta under ddp"

# The second workspace's actions that run a process, and how many the disk cache answered (the rest are that
# workspace's own: its backend, the links that include it, the tests).
hits=0 ran=0
while read -r line; do
  h=$(sed -n -E 's/.* ([0-9]+) remote cache hit.*/\1/p' <<<"$line")
  r=$(sed -n -E 's/.* ([0-9]+) (linux-sandbox|local|processwrapper-sandbox).*/\1/p' <<<"$line")
  hits=$((hits + ${h:-0})) ran=$((ran + ${r:-0}))
done < <(grep -aE '^INFO: [0-9]+ process(es)?:' "$root/second/.readme_commands.log")
echo "second workspace: $hits actions from the disk cache, $ran run (its backend, links, tests)"
# The vendor's workspace: docs/collectives.md's files, accelerators.md's .bazelrc, the double as the vendor's library.
(cd "$kiln" && bazel build //tests/vendor_stack:acme_torch >/dev/null 2>&1) || fail "building Kiln's vendor double failed"
vendor_library=$(cd "$kiln" && readlink -f bazel-bin/tests/vendor_stack/libacme_torch.so)
collectives="$kiln/docs/collectives.md"
vendor="$root/vendor"
mkdir -p "$vendor"
block .bazelrc >"$vendor/.bazelrc"
for name in WORKSPACE BUILD; do
  block "$name" "$collectives" vendor-workspace | sed -e "s|/path/to/kiln|$kiln|g" >"$vendor/$name"
  [[ -s "$vendor/$name" ]] || fail "docs/collectives.md has no <!-- vendor-workspace: $name --> block"
done
block commands "$collectives" vendor-workspace | sed -e "s|/path/to/kiln|$kiln|g" \
  -e "s|/opt/acme/lib/libacme_torch.so|$vendor_library|g" >"$vendor/.readme_commands.sh"
run_workspace "$vendor"
grep -aq "Trained on acme_npu (ddp" "$vendor/.readme_commands.log" ||
  fail "vendor: fit did not say it trained on acme_npu under ddp"
echo "user workspace check passed: two workspaces built from docs/accelerators.md and a vendor's from docs/collectives.md passed conformance and trained"
