#!/usr/bin/env bash
# Drives the real //trainer:fit with accelerator plugins loaded at run time (hal/plugin/kiln_plugin_c_api.h): the
# sample plugin (examples/sample_plugin) by --accelerator_plugin and by KILN_ACCELERATOR_PLUGINS, chosen by name,
# alias and "auto", trains with the CPU run's parameters bit for bit (it computes on LibTorch's CPU device), with one
# process or two (then on its own collectives, sample_ccl, which also end a run whose peer stops answering within the
# timeout); the sample device plugins (examples/device_plugin), two loaded at once, train on the one chosen with the
# CPU run's parameters, alone or data-parallel (Kiln stages their tensors through host memory); broken plugins stop fit
# before training with exit status 2 and one error line naming the path.
set -uo pipefail
fit=trainer/cli/fit
sample=examples/sample_plugin/libkiln_sample_plugin.so
alpha=examples/device_plugin/libalpha_npu_plugin.so
beta=examples/device_plugin/libbeta_npu_plugin.so
tests=hal/plugin
# The C API's version, from its header: the wrong-major test plugin reports the major version plus one.
minor=$(sed -n -E 's/^#define KILN_PLUGIN_API_MINOR ([0-9]+)$/\1/p' hal/plugin/kiln_plugin_c_api.h)
major=$(sed -n -E 's/^#define KILN_PLUGIN_API_MAJOR ([0-9]+)$/\1/p' hal/plugin/kiln_plugin_c_api.h)
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
unset KILN_ACCELERATOR_PLUGINS SAMPLE_PLUGIN_PRIORITY

sha() { sed -n -E 's/.*"params_sha256": "([0-9a-f]{64})".*/\1/p' "$1" 2>/dev/null; }

# train <label> <env assignments...> -- <flags...>: runs fit into $tmp/<label>, keeping its output and summary.
train() {
  local label=$1
  shift
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" $fit --max_epochs=2 --enable_progress_bar=false --enable_checkpointing=false \
    --summary_json="$tmp/$label.json" "$@" >"$tmp/$label.out" 2>"$tmp/$label.err"
  local status=$?
  [[ $status -eq 0 ]] || fail "$label: fit $* exited $status: $(tail -n 3 "$tmp/$label.err")"
}

expect_trained_on() {  # expect_trained_on <label> <accelerator> [strategy]
  grep -q "^Trained on $2 (${3:-single_device}, 32-true) for 2 epochs" "$tmp/$1.out" ||
    fail "$1: no 'Trained on $2' line in: $(cat "$tmp/$1.out")"
}

expect_parameters_of() {  # expect_parameters_of <label> <reference label>
  local got want
  got=$(sha "$tmp/$1.json")
  want=$(sha "$tmp/$2.json")
  [[ -n "$got" && -n "$want" ]] || { fail "$1 or $2 wrote no params_sha256"; return; }
  [[ "$got" == "$want" ]] || fail "$1: parameters differ from $2 ($got vs $want)"
}

train cpu -- --accelerator=cpu
expect_trained_on cpu cpu

# By flag and name; the plan runs on LibTorch's CPU device, and the parameters are the CPU run's.
train flag -- --accelerator_plugin="$sample" --accelerator=sample_plugin
expect_trained_on flag sample_plugin
grep -qF '"accelerator": "sample_plugin", "devices": ["cpu"]' "$tmp/flag.json" || fail "flag: plan: $(cat "$tmp/flag.json")"
expect_parameters_of flag cpu

# By environment (an absolute path, empty entries ignored) and alias.
train env "KILN_ACCELERATOR_PLUGINS=:$PWD/$sample:" -- --accelerator=sample
expect_trained_on env sample_plugin
expect_parameters_of env cpu

# The same plugin by flag and by environment is loaded once.
train both "KILN_ACCELERATOR_PLUGINS=$PWD/$sample" -- --accelerator_plugin=./"$sample" --accelerator=sample_plugin
expect_trained_on both sample_plugin

# "auto": its default priority (-20) keeps the CPU; a raised one wins over every built-in accelerator.
train auto_default -- --accelerator_plugin="$sample"
expect_trained_on auto_default cpu
train auto_raised SAMPLE_PLUGIN_PRIORITY=100 -- --accelerator_plugin="$sample"
expect_trained_on auto_raised sample_plugin
expect_parameters_of auto_raised cpu

# Two processes: the launched rank loads the plugin from the same flags, and DDP exchanges gradients through the
# plugin's own collectives (sample_ccl, plugin API 1.1), not Gloo. The parameters equal two CPU processes' on Gloo bit
# for bit: with two ranks every sum is a + b, in whichever order, and the reducer, buckets and data are the same.
train cpu_ddp -- --accelerator=cpu --devices=2 --strategy=ddp
grep -qF '"process_group_backend": "gloo"' "$tmp/cpu_ddp.json" || fail "cpu_ddp: plan: $(cat "$tmp/cpu_ddp.json")"
train plugin_ddp -- --accelerator_plugin="$sample" --accelerator=sample_plugin --devices=2 --strategy=ddp
expect_trained_on plugin_ddp sample_plugin ddp
grep -qF '"process_group_backend": "sample_ccl"' "$tmp/plugin_ddp.json" ||
  fail "plugin_ddp: the plan names no sample_ccl backend: $(cat "$tmp/plugin_ddp.json")"
expect_parameters_of plugin_ddp cpu_ddp

# Two device plugins loaded, the one chosen trains: nothing registers when they load, and Kiln registers the chosen
# one's device (plugin API 1.2). It computes through the CPU's kernels, so the parameters are the CPU's; with two
# processes its tensors cross on Gloo through host memory (Kiln's staged collectives, named by the plugin), and the
# parameters are two CPU processes' on Gloo.
train device -- --accelerator_plugin="$alpha" --accelerator_plugin="$beta" --accelerator=alpha_npu --devices=1
expect_trained_on device alpha_npu
grep -qF '"accelerator": "alpha_npu", "devices": ["alpha_npu:0"]' "$tmp/device.json" ||
  fail "device: plan: $(cat "$tmp/device.json")"
expect_parameters_of device cpu
train device_ddp -- --accelerator_plugin="$alpha" --accelerator_plugin="$beta" --accelerator=beta_npu --devices=2 \
  --strategy=ddp
expect_trained_on device_ddp beta_npu ddp
grep -qF '"process_group_backend": "beta_npu_staged"' "$tmp/device_ddp.json" ||
  fail "device_ddp: the plan names no beta_npu_staged backend: $(cat "$tmp/device_ddp.json")"
expect_parameters_of device_ddp cpu_ddp

# A rank that stops answering (SIGSTOP: alive, but silent) ends the run within the timeout: rank 0's sample_ccl call
# fails with DEADLINE_EXCEEDED naming the collective and the rank, and the launcher takes the stopped rank down.
start=$(date +%s)
$fit --accelerator_plugin="$sample" --accelerator=sample_plugin --devices=2 --strategy=ddp --max_epochs=200 \
  --num_train=32768 --enable_progress_bar=false --log_every_n_steps=0 --enable_checkpointing=false \
  --num_sanity_val_steps=0 --process_group_timeout=5 --default_root_dir="$tmp/stopped" >"$tmp/stopped.log" 2>&1 &
launcher=$!
child=""
for _ in $(seq 1 400); do
  child=$(pgrep -P $launcher | head -1)
  [[ -n "$child" ]] && grep -q "joined at" "$tmp/stopped.log" && break
  sleep 0.05
done
if [[ -z "$child" ]]; then
  fail "stopped: no child process appeared: $(tail -n 3 "$tmp/stopped.log")"
  kill -KILL $launcher 2>/dev/null
else
  sleep 1
  kill -STOP "$child"
  wait $launcher
  code=$?
  elapsed=$(($(date +%s) - start))
  [[ $code -ne 0 ]] || fail "stopped: the launcher exited 0 while its rank 1 was stopped"
  [[ $elapsed -lt 30 ]] || fail "stopped: took ${elapsed}s to end with a 5 s timeout"
  grep -qE "sample_ccl [a-z_]+ on rank [01] of 2 failed \(DEADLINE_EXCEEDED\).*sample_ccl [A-Za-z]+: rank 1 did not (arrive|take its data) within the timeout of 5000 ms" \
    "$tmp/stopped.log" || fail "stopped: no sample_ccl error naming rank 1: $(grep "^error" "$tmp/stopped.log")"
  kill -0 "$child" 2>/dev/null && { fail "stopped: rank 1 was left behind"; kill -KILL "$child"; }
fi

# The plugin's precision substitute, with its warning.
$fit --accelerator_plugin="$sample" --accelerator=sample_plugin --precision=16-mixed --max_epochs=1 \
  --enable_progress_bar=false --enable_checkpointing=false >"$tmp/mixed.out" 2>"$tmp/mixed.err" ||
  fail "16-mixed on the plugin exited $?: $(tail -n 3 "$tmp/mixed.err")"
grep -q "^Trained on sample_plugin (single_device, bf16-mixed)" "$tmp/mixed.out" ||
  fail "16-mixed did not run as bf16-mixed: $(cat "$tmp/mixed.out")"
grep -qF "sample_plugin computes on the CPU, whose autocast is bfloat16 only. Using \`precision='bf16-mixed'\` instead." \
  "$tmp/mixed.err" || fail "no substitute warning: $(cat "$tmp/mixed.err")"

# Bad plugins: exit 2 before training, with one error line that names the path and the problem.
expect_usage_error() {  # expect_usage_error <stderr fragment> <env assignment or -> <flags>...
  local fragment=$1 assignment=$2
  shift 2
  local err code
  if [[ $assignment == - ]]; then
    err=$($fit --enable_progress_bar=false --enable_checkpointing=false "$@" 2>&1 >/dev/null)
  else
    err=$(env "$assignment" $fit --enable_progress_bar=false --enable_checkpointing=false "$@" 2>&1 >/dev/null)
  fi
  code=$?
  [[ $code -eq 2 ]] || { fail "fit $assignment $* exited $code, wanted 2: $err"; return; }
  grep -q "^error: " <<<"$err" || fail "fit $assignment $*: no 'error: ' line in: $err"
  grep -qF -- "$fragment" <<<"$err" || fail "fit $assignment $*: '$fragment' not in: $err"
  grep -q "^Epoch\|Trained on" <<<"$err" && fail "fit $assignment $*: trained despite the error"
}
expect_usage_error "error: accelerator plugin '$tests/libtest_plugin_absent.so': No such file or directory" \
  - --accelerator_plugin=$tests/libtest_plugin_absent.so
expect_usage_error "error: accelerator plugin '$tests/testing/not_a_plugin.so' cannot be loaded as a shared library" \
  - --accelerator_plugin=$tests/testing/not_a_plugin.so
expect_usage_error "was built for plugin API version $((major + 1)).$minor, but this Kiln implements $major.$minor" \
  - --accelerator_plugin=$tests/libtest_plugin_wrong_major.so
expect_usage_error "'$tests/libtest_plugin_missing_symbol.so' does not export KILN_GetPluginApi" \
  - --accelerator_plugin=$tests/libtest_plugin_missing_symbol.so
expect_usage_error "is a bare file name: Kiln loads plugins only from the paths it is given" \
  - --accelerator_plugin=libkiln_sample_plugin.so
expect_usage_error "accelerator plugin path is empty" - --accelerator_plugin=
# The plugin's own error, from Plugin_Initialize.
expect_usage_error "Plugin_Initialize: sample_plugin: SAMPLE_PLUGIN_PRIORITY='high' is not an integer" \
  SAMPLE_PLUGIN_PRIORITY=high --accelerator_plugin="$sample"
# From the environment too.
expect_usage_error "error: accelerator plugin '$tests/libtest_plugin_null_function.so' has no Device_Stats" \
  KILN_ACCELERATOR_PLUGINS=$tests/libtest_plugin_null_function.so --accelerator=cpu
# Every --accelerator_plugin counts, not only the last (Abseil's flags keep the last value).
expect_usage_error "'$tests/libtest_plugin_wrong_major.so' was built for plugin API version $((major + 1)).$minor" \
  - --accelerator_plugin=$tests/libtest_plugin_wrong_major.so --accelerator_plugin="$sample"
# A PrivateUse1 plugin of API 1.1 registers its device when it is loaded; the test plugin (in C) registers none, so
# choosing it is refused as unavailable, saying so.
expect_usage_error "computes on privateuseone devices, but LibTorch in this process has no privateuseone device" \
  - --accelerator_plugin=$tests/libtest_plugin_indexed.so --accelerator=test_indexed
# A plugin's name must be new: a copy of the sample (another file, so loaded again) cannot register it twice.
cp "$sample" "$tmp/copy_of_sample.so"
expect_usage_error "accelerator plugin '$tmp/copy_of_sample.so' cannot be registered: accelerator name 'sample_plugin' (registered in the plugin $tmp/copy_of_sample.so) is already taken by accelerator 'sample_plugin' (registered in the plugin $sample)" \
  - --accelerator_plugin="$sample" --accelerator_plugin="$tmp/copy_of_sample.so"
# Without the plugin, its name is unknown.
expect_usage_error "unknown accelerator 'sample_plugin'" - --accelerator=sample_plugin

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "accelerator plugin end-to-end checks passed (parameters $(sha "$tmp/cpu.json") on cpu and sample_plugin)"
