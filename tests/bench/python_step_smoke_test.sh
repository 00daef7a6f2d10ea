#!/usr/bin/env bash
# CI's run of python_step.py (PyTorch's Python loop and the real Lightning's Trainer.fit on step_bench's workloads),
# at tiny sizes: the point is that it runs and that every mode trains the same model, not its numbers. It needs the
# Python with Lightning that tests/lightning use (@lightning_python), and, as they do (tests/lightning/common.sh),
# passes saying SKIPPED and why when that Python cannot import Lightning.
set -uo pipefail
step=$PWD/tests/bench/python_step.py
lightning_modules=lightning
source tests/lightning/common.sh

"$python" "$step" --steps=20 --rounds=1 >step.out 2>step.err || { tail -15 step.err; fail "python_step.py failed"; }
cat step.out
for workload in tiny medium many; do
  for mode in for_loop foreach fused lightning; do
    grep -q "^python_step workload=$workload mode=$mode us_per_step=[0-9.]* final_loss=[0-9.]* rounds=1 " step.out ||
      fail "no line for workload $workload, mode $mode"
  done
  grep -q "^python_step_fingerprint workload=$workload init_param_sum=[-0-9.e]* first_input_sum=[-0-9.e]*$" step.out ||
    fail "no fingerprint for workload $workload"
  # The program checks the losses itself (to LOSS_RTOL); checked here too, in case that check broke, and more
  # strictly: at 20 steps every mode's final loss is the same to the 9 digits printed.
  losses=$(sed -n "s/^python_step workload=$workload mode=.* final_loss=\([^ ]*\) .*/\1/p" step.out | sort -u)
  [[ $(wc -l <<<"$losses") == 1 ]] ||
    fail "the modes' final losses of workload $workload differ: $(tr '\n' ' ' <<<"$losses")"
done

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
versions=$("$python" -c 'import lightning, torch
print(f"PyTorch {torch.__version__}, Lightning {lightning.__version__}")' 2>/dev/null)
echo "PASS: python_step.py ran ($versions) on step_bench's workloads, every mode to the same final loss"
