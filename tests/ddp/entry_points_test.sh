#!/usr/bin/env bash
# A user's own program on several processes (tests/ddp/entry_points.cc): a validate, a fit, a validate, a test and a
# predict on one Trainer, then a fit on a second Trainer, on 2 and 4 processes, on the CPU and on the virtual NPU,
# launched by Kiln once for the whole program, and under torchrun and mpirun (their launch). It checks:
# - every rank takes part in every entry point and ends where rank 0 does (the same metrics, predictions and
#   parameters), the virtual NPU where the CPU does, bit for bit, and torchrun's and mpirun's ranks where Kiln's own;
# - the rank API (global, local, node rank, world size, is_global_zero) before the first entry point and after the
#   last, on the Trainer and in training_step on the module; on_save_checkpoint runs on every rank;
# - validation metrics at 2 and 4 processes equal one process's within 1e-6 relative (the bound docs/library.md
#   states: each batch's float32 mean depends on which examples share the batch);
# - ranks that call different entry points, a rank that ends its program early (rank 0 or another), and a rank that
#   never comes all end every rank with an error naming the rank and the entry point, in bounded time.
set -uo pipefail
program=$PWD/tests/ddp/entry_points
work=${TEST_TMPDIR:-$(mktemp -d)}
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
export VIRTUAL_NPU_DEVICES=4
sequence=validate,fit,validate,test,predict,new,fit

# run NAME ACCELERATOR DEVICES SEQUENCE [SEQUENCE_OF_THE_LAST_RANK]: the program, its output in NAME.out/NAME.err.
run() {
  local name=$1
  shift
  mkdir -p "$name"
  timeout 300 "$program" "$PWD/$name" "$@" >"$name.out" 2>"$name.err"
}
errors() { grep -v '^[IW][0-9]\|^WARNING: Logging before' "$1" | tail -n 4; }
# What every rank must agree on: everything but the lines that name the rank.
shared() { grep -v '^before \|^after \|^training_step saw' "$1"; }

echo "== one process, the reference for the metrics"
run one cpu 1 "$sequence" || fail "one process: $(errors one.err)"

for accelerator in cpu virtual_npu; do
  for n in 2 4; do
    name=${accelerator}_$n
    echo "== $name: $sequence"
    run "$name" "$accelerator" "$n" "$sequence" || { fail "$name: $(errors "$name.err")"; continue; }
    for ((rank = 0; rank < n; ++rank)); do
      file=$name/rank$rank.txt
      [[ -s $file ]] || { fail "$name: rank $rank wrote no $file"; continue; }
      zero=$((rank == 0 ? 1 : 0))
      for when in before after; do
        grep -qx "$when global=$rank local=$rank node=0 world=$n zero=$zero" "$file" ||
          fail "$name rank $rank: the rank API $when the entry points says: $(grep "^$when " "$file")"
      done
      grep -qx "training_step saw global, local $rank $rank" "$file" ||
        fail "$name rank $rank: the module's rank API in training_step: $(grep '^training_step' "$file")"
      cmp -s <(shared "$name/rank0.txt") <(shared "$file") ||
        { diff <(shared "$name/rank0.txt") <(shared "$file") | head -4; fail "$name: rank $rank ended unlike rank 0"; }
    done
    entries=$(grep -cE '^(validate|fit|test|predict) ' "$name/rank0.txt")
    [[ $entries -eq 6 ]] || fail "$name: rank 0 ran $entries entry points, not 6"
    # Two fits of 2 epochs, a checkpoint each epoch: the hook runs on every rank (the files agree above).
    grep -qx "on_save_checkpoint 4" "$name/rank0.txt" ||
      fail "$name: on_save_checkpoint ran '$(grep '^on_save' "$name/rank0.txt")' times on rank 0, not 4"
    # The first validate (before any training) against one process's.
    python3 - "one/rank0.txt" "$name/rank0.txt" <<'EOF' || fail "$name: validation metrics beyond the bound"
import sys
def first_validate(path):
    line = next(l for l in open(path) if l.startswith("validate "))
    return {k: float.fromhex(v) for k, v in (item.split("=") for item in line.split()[1:])}
one, many = first_validate(sys.argv[1]), first_validate(sys.argv[2])
worst = max(abs(many[k] - one[k]) / abs(one[k]) for k in one)
print(f"  validation metrics against one process: largest relative difference {worst:.2e} (bound 1e-6)")
sys.exit(0 if set(one) == set(many) and worst <= 1e-6 else 1)
EOF
  done
  if [[ $accelerator == virtual_npu ]]; then
    for n in 2 4; do
      cmp -s "cpu_$n/rank0.txt" "virtual_npu_$n/rank0.txt" || fail "$n virtual NPUs did not end as $n CPU processes"
    done
  fi
done

echo "== ranks that disagree end in bounded time, naming the rank and the entry point"
# expect NAME SECONDS TEXT...: the run failed within SECONDS, and its standard error holds each TEXT.
expect() {
  local name=$1 bound=$2 code elapsed
  shift 2
  code=$(cat "$name.code")
  elapsed=$(cat "$name.seconds")
  echo "  $name: exit $code after ${elapsed} s"
  [[ $code -ne 0 ]] || fail "$name exited 0"
  (( $(echo "$elapsed < $bound" | bc) )) || fail "$name took ${elapsed} s, more than $bound"
  for text in "$@"; do grep -qF "$text" "$name.err" || fail "$name: no '$text' in: $(errors "$name.err")"; done
}
timed() {  # timed NAME ARGS...: run, keeping its exit status and wall time.
  local name=$1 start
  start=$(date +%s.%N)
  run "$@"
  echo $? >"$name.code"
  echo "$(date +%s.%N) - $start" | bc >"$name.seconds"
}
timed differ cpu 2 fit,validate fit,test
expect differ 20 "rank 0 (this one) called validate, rank 1 called test" \
  "rank 1 (this one) called test, rank 0 called validate"
timed differ4 cpu 4 fit,validate fit,test
expect differ4 20 "rank 3 (this one) called test, rank 0 called validate" \
  "rank 0 (this one) called validate, rank 3 called test"
timed leaves cpu 2 fit,test fit
expect leaves 20 "rank 1 ended its program after 1 entry point (the last: fit), while rank 0 (this one) called test as entry point 2"
timed zero_leaves cpu 2 fit fit,test
expect zero_leaves 20 \
  "rank 0 ended its program after 1 entry point (the last: fit), while rank 1 (this one) called test as entry point 2" \
  "error: this program's other processes did not end well: rank 1 exited with status 1"
ENTRY_POINTS_TIMEOUT_S=5 timed never_comes cpu 2 fit,test fit,sleep,test
expect never_comes 20 "rank 1 did not come to entry point 2 of this program (test)"

echo "== the same program under torchrun and mpirun: their launch, the same sequence, the same results"
for tool in /usr/bin/torchrun mpirun; do
  command -v "$tool" >/dev/null || { fail "$tool is missing; run tools/setup.sh"; }
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Debian's torchrun is PyTorch 1.13's: its agent's store protocol is not LibTorch 2.x's, so rank 0 serves the store
# (the c10d rendezvous), as tests/ddp:launchers_test explains.
port=$(free_port)
mkdir -p torchrun
/usr/bin/torchrun --no_python --redirects=0:2 --tee=0:2 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" \
  --rdzv_id="kiln$port" --nproc_per_node=2 "$program" "$PWD/torchrun" cpu 2 "$sequence" >torchrun.out 2>torchrun.err ||
  fail "torchrun: $(errors torchrun.err)"
port=$(free_port)
mkdir -p mpirun
mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" \
  "$program" "$PWD/mpirun" cpu 2 "$sequence" >mpirun.out 2>mpirun.err || fail "mpirun: $(errors mpirun.err)"
for launcher in torchrun mpirun; do
  for rank in 0 1; do
    cmp -s "cpu_2/rank$rank.txt" "$launcher/rank$rank.txt" ||
      { diff "cpu_2/rank$rank.txt" "$launcher/rank$rank.txt" | head -4; fail "$launcher: rank $rank ended unlike Kiln's own launch"; }
  done
done

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS: six entry points on two Trainers at 2 and 4 processes (CPU and virtual NPU, Kiln's launch, torchrun," \
  "mpirun), every rank in each; disagreeing ranks end in bounded time, named"
