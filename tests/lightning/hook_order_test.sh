#!/usr/bin/env bash
# The hooks' order, Kiln's beside the real Lightning's (2.x from PyPI, tools/setup.sh): the same run (fit with a
# sanity check, validation and a checkpoint, validate from the checkpoint, test, predict) records every module and
# callback hook Kiln has, in Kiln (tests/lightning/hook_order.cc) and in Lightning (hook_order.py, which records the
# same hooks, the list Kiln's program gives), and the two sequences must be the same, call for call; then again
# under manual optimization.
set -uo pipefail
kiln=$PWD/tests/lightning/hook_order
script=$PWD/tests/lightning/hook_order.py
source "$PWD/tests/lightning/common.sh"

"$kiln" --hooks >hooks.txt || fail "hook_order --hooks failed"
"$kiln" >kiln.txt 2>kiln.err || { tail -5 kiln.err; fail "Kiln's run failed"; }
lightning "$script" hooks.txt >lightning.txt || fail "Lightning's run failed"
# Every hook of the list is called somewhere (on_exception aside: nothing fails), so the comparison covers them all.
for hook in $(grep -v '^Callback.on_exception$' hooks.txt); do
  grep -q -E "^$hook(:.*)?\$" lightning.txt || fail "Lightning never called $hook: the run does not exercise it"
done
if ! diff -u lightning.txt kiln.txt >order.diff; then
  echo "The hooks' order differs (- Lightning, + Kiln):"
  cat order.diff
  fail "Kiln calls the hooks in another order than Lightning"
fi
# Manual optimization: the step's own zero_grad, manual_backward and step.
"$kiln" --manual >kiln_manual.txt 2>kiln_manual.err || { tail -5 kiln_manual.err; fail "Kiln's manual run failed"; }
lightning "$script" hooks.txt --manual >lightning_manual.txt || fail "Lightning's manual run failed"
if ! diff -u lightning_manual.txt kiln_manual.txt >manual.diff; then
  echo "Under manual optimization the hooks' order differs (- Lightning, + Kiln):"
  cat manual.diff
  fail "Kiln calls the hooks in another order than Lightning under manual optimization"
fi
finish "$(grep -c -v '^==' kiln.txt) hook calls in Lightning's order, and $(grep -c -v '^==' kiln_manual.txt) under" \
  "manual optimization"
