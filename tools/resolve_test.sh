#!/usr/bin/env bash
# Drives the real //tools:resolve binary: the JSON plan, warnings on standard error, cluster variables, bad input
# (exit 2 and one `error: ` line), and that //trainer:fit rejects the same input with the same line.
set -uo pipefail
resolve=tools/resolve
fit=trainer/cli/fit
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
err=$(mktemp)

# check_plan <python condition on the plan `p`> <resolve arguments>...: the command exits 0, prints exactly one
# line of JSON with every documented key on standard output, and the condition holds.
check_plan() {
  local condition=$1
  shift
  local out
  out=$("$@" 2>"$err")
  local code=$?
  if [[ $code -ne 0 ]]; then fail "$* exited $code: $(cat "$err")"; return; fi
  if [[ $(wc -l <<<"$out") -ne 1 ]]; then fail "$*: standard output is not one line: $out"; return; fi
  python3 - "$condition" "$out" <<'PY' || fail "$*: $condition does not hold for $out"
import json, sys
condition, text = sys.argv[1], sys.argv[2]
p = json.loads(text)
keys = ["accelerator", "devices", "logical_devices", "num_devices", "strategy", "process_group_backend", "precision", "num_nodes",
        "world_size", "global_rank", "local_rank", "node_rank", "cluster_environment"]
missing = [k for k in keys if k not in p]
if missing:
    sys.exit("missing keys: %s" % missing)
if not all(isinstance(d, str) for d in p["devices"]) or len(p["devices"]) != p["num_devices"]:
    sys.exit("devices must be num_devices strings")
sys.exit(0 if eval("(" + condition + ")") else 1)
PY
}

check_plan 'p["accelerator"] == "cpu" and p["devices"] == ["cpu"] and p["strategy"] == "single_device" and
p["process_group_backend"] is None and p["precision"] == "32-true" and p["world_size"] == 1 and
p["global_rank"] == 0 and p["cluster_environment"] == "lightning"' $resolve
# "auto" may explain, as notes, why it skipped unavailable backends; a default plan has no warning or error.
grep -v '^note: ' "$err" | grep -q . && fail "a default plan wrote more than notes to standard error: $(cat "$err")"
check_plan 'p["strategy"] == "ddp" and p["process_group_backend"] == "gloo" and p["devices"] == ["cpu", "cpu"] and
p["logical_devices"] == ["cpu:0", "cpu:1"] and p["world_size"] == 2' $resolve --accelerator=CPU --devices=2
check_plan 'p["strategy"] == "ddp" and p["num_nodes"] == 2 and p["world_size"] == 2' $resolve --devices=1 --num_nodes=2
check_plan 'p["strategy"] == "ddp" and p["world_size"] == 1' $resolve --strategy=ddp
# A plugin's accelerator resolves, loaded as fit loads it.
check_plan 'p["accelerator"] == "sample_plugin"' $resolve \
  --accelerator_plugin=examples/sample_plugin/libkiln_sample_plugin.so --accelerator=sample_plugin
check_plan 'p["precision"] == "64-true"' $resolve --precision=64

# The CPU accelerator substitutes bf16-mixed for 16-mixed; its warning goes to standard error.
check_plan 'p["precision"] == "bf16-mixed"' $resolve --precision=16-mixed
grep -qF "warning: You passed \`Trainer(accelerator='cpu', precision='16-mixed')\` but AMP with fp16 is not supported on CPU. Using \`precision='bf16-mixed'\` instead." "$err" ||
  fail "no substitution warning on standard error: $(cat "$err")"
check_plan 'p["precision"] == "bf16-mixed"' $resolve --precision=16
grep -qF "warning: '16' is supported for historical reasons" "$err" || fail "no legacy warning: $(cat "$err")"

# Cluster variables, given to the child process only.
check_plan 'p["cluster_environment"] == "lightning" and p["local_rank"] == 1 and p["node_rank"] == 1 and
p["global_rank"] == 3 and p["world_size"] == 4' env LOCAL_RANK=1 NODE_RANK=1 $resolve --devices=2 --num_nodes=2
check_plan 'p["cluster_environment"] == "torchelastic" and p["global_rank"] == 3 and p["world_size"] == 4' \
  env TORCHELASTIC_RUN_ID=r WORLD_SIZE=4 RANK=3 LOCAL_RANK=1 GROUP_RANK=1 MASTER_ADDR=h MASTER_PORT=2222 \
  $resolve --devices=2 --num_nodes=2
check_plan 'p["cluster_environment"] == "slurm" and p["global_rank"] == 1 and p["local_rank"] == 1' \
  env SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_NNODES=1 SLURM_PROCID=1 SLURM_LOCALID=1 SLURM_NODEID=0 \
  $resolve --devices=2
check_plan 'p["cluster_environment"] == "mpi" and p["global_rank"] == 2 and p["node_rank"] == 1' \
  env OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2 \
  $resolve --devices=2 --num_nodes=2

# Flag files are read as fit reads them (ExpandCommandLine), and their flags meet the same checks.
flagfile=$(mktemp)
printf -- '--devices=1\n--num_nodes=2\n' >"$flagfile"
check_plan 'p["num_nodes"] == 2 and p["world_size"] == 2' $resolve --flagfile="$flagfile"
printf -- '--num_nodes=two\n' >"$flagfile"
# expect_error <stderr fragment> <command>...: exit 2 and exactly one line on standard error, `error: ...`.
expect_error() {
  local fragment=$1
  shift
  local out
  out=$("$@" 2>"$err")
  local code=$?
  [[ $code -eq 2 ]] || { fail "$* exited $code, wanted 2"; return; }
  [[ -z "$out" ]] || fail "$*: wrote to standard output: $out"
  [[ $(wc -l <"$err") -eq 1 ]] || fail "$*: standard error is not one line: $(cat "$err")"
  grep -q "^error: " "$err" || fail "$*: no 'error: ' line in: $(cat "$err")"
  grep -qF -- "$fragment" "$err" || fail "$*: '$fragment' not in: $(cat "$err")"
}
expect_error "unknown accelerator 'tpu'; registered: cpu" $resolve --accelerator=tpu
expect_error "\`Trainer(devices='0')\` value is not a valid input using auto accelerator." $resolve --devices=0
expect_error "invalid devices value 'x'" $resolve --devices=x
expect_error "\`devices\` selected with the cpu accelerator should be an int > 0, got '0,1'" $resolve --devices=0,1
expect_error "You selected an invalid strategy name: \`strategy='fsdp_v9'\`" $resolve --strategy=fsdp_v9
expect_error "strategy='single_device' runs on one device, but 2 device(s)" $resolve --strategy=single_device --devices=2
expect_error "precision 'fp8' is not supported" $resolve --precision=fp8
expect_error "precision '16-true' is not supported by the cpu accelerator" $resolve --precision=16-true
expect_error "num_nodes=0 is not valid" $resolve --num_nodes=0
expect_error "--num_nodes='two' is not valid" $resolve --num_nodes=two
expect_error "--num_nodes='two' is not valid" $resolve --flagfile="$flagfile"
expect_error "unexpected argument 'extra'" $resolve extra
expect_error "You set \`--ntasks=4\` in your SLURM bash script" env SLURM_NTASKS=4 $resolve --devices=4
expect_error "does not match the world size (4, from WORLD_SIZE)" \
  env TORCHELASTIC_RUN_ID=r WORLD_SIZE=4 RANK=0 LOCAL_RANK=0 $resolve --devices=2

# //trainer:fit resolves through the same code: the same bad input gives the same error line.
same_error() {  # same_error <environment assignments or nothing> -- <flags>...
  local vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  local want got
  want=$(env "${vars[@]}" $resolve "$@" 2>&1 >/dev/null | grep '^error: ')
  got=$(env "${vars[@]}" $fit --max_epochs=1 --enable_progress_bar=false "$@" 2>&1 >/dev/null | grep '^error: ')
  [[ -n "$want" && "$want" == "$got" ]] || fail "fit and resolve disagree on $*: '$got' vs '$want'"
}
same_error -- --accelerator=tpu
same_error -- --devices=0
same_error -- --devices=0,1
same_error -- --strategy=fsdp_v9
same_error -- --precision=16-true
same_error -- --num_nodes=0
same_error SLURM_NTASKS=4 -- --devices=4
same_error LOCAL_RANK=3 -- --devices=2

rm -f "$err" "$flagfile"
if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "resolve checks passed"
