#!/usr/bin/env bash
# DDP with real processes on this machine (CPU, Gloo: its CPU tensors through shared memory, or over loopback where
# KILN_SHARED_MEMORY_COLLECTIVES=0), through the real //trainer:fit binary.
set -uo pipefail
fit=trainer/cli/fit
compare=tests/ddp/compare_checkpoints
work=${TEST_TMPDIR:-$(mktemp -d)}
common=(--max_epochs=3 --enable_progress_bar=false --log_every_n_steps=0 --num_sanity_val_steps=0)
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Float32 rounding differs between one sum over 2B examples and two sums over B then an average. Adam's
# normalised steps keep parameters O(1), so after a few hundred steps the drift stays orders of magnitude below
# 1e-5, while a different data order (checked below) moves parameters by ~1e-2.
tolerance=1e-5
# The newest last.ckpt a run wrote under its root (lightning_logs/version_N/checkpoints/last.ckpt).
last() { find "$1" -name last.ckpt -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-; }

echo "== 2 processes with batch 32 each equal 1 process with batch 64"
$fit "${common[@]}" --devices=1 --batch_size=64 --default_root_dir="$work/one64" >"$work/one64.log" 2>&1 ||
  fail "1-process run failed: $(tail -3 "$work/one64.log")"
$fit "${common[@]}" --accelerator=cpu --devices=2 --strategy=ddp --batch_size=32 --default_root_dir="$work/ddp" \
  --summary_json="$work/ddp.json" >"$work/ddp.log" 2>&1 || fail "2-process run failed: $(tail -5 "$work/ddp.log")"
grep -q '"strategy": "ddp"' "$work/ddp.json" || fail "the summary does not record the ddp strategy"
grep -q '"world_size": 2' "$work/ddp.json" || fail "the summary does not record world_size 2"
[[ $(grep -c "Trained on" "$work/ddp.log") -eq 1 ]] || fail "more than one rank printed the final report"
$compare "$(last "$work/ddp")" "$(last "$work/one64")" $tolerance ||
  fail "2-process DDP parameters differ from the 1-process run with the doubled batch"
[[ $(grep -c "exchanges CPU tensors through shared memory" "$work/ddp.log") -eq 2 ]] ||
  fail "the two ranks on one host did not both exchange their tensors through shared memory: $(grep gloo "$work/ddp.log")"
# Gloo's own connections (what ranks on several hosts use) give the same training.
KILN_SHARED_MEMORY_COLLECTIVES=0 $fit "${common[@]}" --accelerator=cpu --devices=2 --strategy=ddp --batch_size=32 \
  --default_root_dir="$work/ddp_tcp" >"$work/ddp_tcp.log" 2>&1 || fail "2-process run on Gloo's connections failed"
[[ $(grep -c "exchanges CPU tensors over Gloo's connections (KILN_SHARED_MEMORY_COLLECTIVES=0)" "$work/ddp_tcp.log") \
  -eq 2 ]] || fail "KILN_SHARED_MEMORY_COLLECTIVES=0 did not keep Gloo's connections: $(grep gloo "$work/ddp_tcp.log")"
$compare "$(last "$work/ddp_tcp")" "$(last "$work/one64")" $tolerance ||
  fail "2-process DDP on Gloo's connections differs from the 1-process run with the doubled batch"
# The comparison can fail: one process with batch 32 sees other batches, and ends elsewhere.
$fit "${common[@]}" --devices=1 --batch_size=32 --default_root_dir="$work/one32" >/dev/null 2>&1
if $compare "$(last "$work/ddp")" "$(last "$work/one32")" $tolerance >/dev/null; then
  fail "the comparison does not tell different runs apart"
fi

echo "== two nodes on loopback, one process each, started separately"
# Two nodes would have their own cores; on one machine each gets its share (OMP_NUM_THREADS=1), or their intra-op
# threads oversubscribe the cores (fit does this itself for the processes of one node).
port=$(free_port)
for node in 0 1; do
  OMP_NUM_THREADS=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NODE_RANK=$node \
    $fit "${common[@]}" --devices=1 --num_nodes=2 --batch_size=32 --process_group_timeout=60 \
    --default_root_dir="$work/nodes" --summary_json="$work/nodes$node.json" >"$work/node$node.log" 2>&1 &
  pids[$node]=$!
done
for node in 0 1; do wait ${pids[$node]} || fail "node $node failed: $(tail -5 "$work/node$node.log")"; done
[[ -f "$work/nodes0.json" && ! -f "$work/nodes1.json" ]] || fail "only node 0 (global rank 0) should report"
grep -q '"num_nodes": 2' "$work/nodes0.json" || fail "node 0's plan does not say num_nodes 2"
$compare "$(last "$work/nodes")" "$(last "$work/one64")" $tolerance ||
  fail "2 nodes x 1 process with batch 32 differ from 1 process with batch 64"

echo "== torchrun-style: an external launcher starts both processes with its variables"
port=$(free_port)
for rank in 0 1; do
  TORCHELASTIC_RUN_ID=kiln-test RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$port $fit "${common[@]}" --devices=2 --strategy=ddp --batch_size=32 --process_group_timeout=60 \
    --default_root_dir="$work/torchrun" --summary_json="$work/torchrun$rank.json" >"$work/torchrun$rank.log" 2>&1 &
  pids[$rank]=$!
done
for rank in 0 1; do wait ${pids[$rank]} || fail "torchrun-style rank $rank failed: $(tail -5 "$work/torchrun$rank.log")"; done
grep -q '"cluster_environment": "torchelastic"' "$work/torchrun0.json" || fail "torchelastic was not detected"
$compare "$(last "$work/torchrun")" "$(last "$work/one64")" $tolerance ||
  fail "torchrun-style ranks differ from 1 process with batch 64"

echo "== a killed rank makes the others exit non-zero, naming it, with nothing left behind"
long=(--max_epochs=50 --num_train=32768 --enable_progress_bar=false --log_every_n_steps=0 --enable_checkpointing=false)
start=$(date +%s)
$fit "${long[@]}" --devices=2 --strategy=ddp --process_group_timeout=20 >"$work/kill.log" 2>&1 &
launcher=$!
child=""
for _ in $(seq 1 200); do
  child=$(pgrep -P $launcher | head -1)
  [[ -n "$child" ]] && grep -q "joined at" "$work/kill.log" && break
  sleep 0.05
done
[[ -n "$child" ]] || fail "no child process appeared"
sleep 0.5
kill -KILL "$child"
wait $launcher
code=$?
elapsed=$(( $(date +%s) - start ))
[[ $code -ne 0 ]] || fail "the launcher exited 0 after its rank 1 was killed"
grep -q "rank 1 (local rank 1, pid $child) was killed by signal 9" "$work/kill.log" ||
  fail "no message naming the killed rank: $(tail -3 "$work/kill.log")"
[[ $elapsed -lt 20 ]] || fail "took ${elapsed}s to notice the dead rank"
sleep 0.2
pgrep -P $launcher >/dev/null && fail "a rank was left running"

echo "== a rank that never joins: the other fails within the timeout, saying why"
port=$(free_port)
start=$(date +%s)
LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  $fit "${common[@]}" --devices=2 --strategy=ddp --process_group_timeout=3 >"$work/alone.log" 2>&1
code=$?
elapsed=$(( $(date +%s) - start ))
[[ $code -ne 0 ]] || fail "a rank whose peer never came exited 0"
grep -q "^error: rank 0 of 2 could not meet the other ranks at 127.0.0.1:$port within 3s" "$work/alone.log" ||
  fail "unclear message: $(grep error "$work/alone.log")"
[[ $elapsed -lt 30 ]] || fail "took ${elapsed}s with a 3 s timeout"

echo "== validation metrics are over every rank: one checkpoint validated with 1, 2 and 3 processes"
# 101 validation examples in batches of 16 split unevenly over 2 and 3 processes (51+50, 34+34+33): the global
# means weigh every example once, so they equal one process's to float rounding.
val=(--num_val=101 --batch_size=16 --enable_progress_bar=false)
$fit "${val[@]}" --max_epochs=1 --default_root_dir="$work/val" >"$work/val-train.log" 2>&1 ||
  fail "the run to validate failed: $(tail -3 "$work/val-train.log")"
checkpoint=$(last "$work/val")
for devices in 1 2 3; do
  $fit "${val[@]}" --mode=validate --ckpt_path="$checkpoint" --accelerator=cpu --devices=$devices \
    --summary_json="$work/val$devices.json" >"$work/val$devices.log" 2>&1 ||
    fail "validating with $devices processes failed: $(tail -3 "$work/val$devices.log")"
done
python3 - "$work" <<'PY' || fail "validation metrics depend on the number of processes"
import json, sys
work = sys.argv[1]
runs = {n: json.load(open(f"{work}/val{n}.json"))["final_metrics"] for n in (1, 2, 3)}
for n in (2, 3):
    for name in ("val_loss", "val_acc"):
        one, many = runs[1][name], runs[n][name]
        print(f"{name}: 1 process {one:.9f}, {n} processes {many:.9f}")
        if abs(one - many) > 1e-6 * max(1.0, abs(one)):
            sys.exit(1)
PY
for devices in 1 2 3; do
  $fit "${val[@]}" --mode=predict --ckpt_path="$checkpoint" --accelerator=cpu --devices=$devices \
    --predictions="$work/predictions$devices.csv" >"$work/predict$devices.log" 2>&1 ||
    fail "predicting with $devices processes failed: $(tail -3 "$work/predict$devices.log")"
done
[[ $(grep -c '' "$work/predictions1.csv") -eq 102 ]] || fail "1 process wrote $(grep -c '' "$work/predictions1.csv") lines"
python3 - "$work" <<'PY' || fail "predictions depend on the number of processes (or rows were lost)"
import csv, sys
work = sys.argv[1]
rows = {n: list(csv.reader(open(f"{work}/predictions{n}.csv"))) for n in (1, 2, 3)}
for n in (2, 3):
    print(f"{n} processes: {len(rows[n]) - 1} predictions, 1 process: {len(rows[1]) - 1}")
    if len(rows[n]) != len(rows[1]):
        sys.exit(1)
    for one, many in zip(rows[1][1:], rows[n][1:]):
        if one[:2] != many[:2] or any(abs(float(a) - float(b)) > 1e-5 for a, b in zip(one[2:], many[2:])):
            print("differs:", one, many)
            sys.exit(1)
PY

echo "== a master port in use is a clear error"
port=$(free_port)
python3 -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', $port)); s.listen(); time.sleep(30)" &
holder=$!
sleep 0.3
MASTER_PORT=$port $fit "${common[@]}" --devices=2 --strategy=ddp --process_group_timeout=5 >"$work/port.log" 2>&1
code=$?
kill $holder 2>/dev/null
[[ $code -ne 0 ]] || fail "a taken master port did not fail the run"
grep -q "^error: MASTER_PORT=$port is already in use on this machine" "$work/port.log" ||
  fail "unclear message for a taken port: $(grep error "$work/port.log")"

echo "== SIGTERM on the launcher stops every rank"
$fit "${long[@]}" --devices=2 --strategy=ddp >"$work/term.log" 2>&1 &
launcher=$!
for _ in $(seq 1 200); do grep -q "joined at" "$work/term.log" && break; sleep 0.05; done
child=$(pgrep -P $launcher | head -1)
[[ -n "$child" ]] || fail "no child process to watch"
kill -TERM $launcher
wait $launcher
code=$?
[[ $code -ne 0 ]] || fail "the launcher exited 0 after SIGTERM"
for _ in $(seq 1 50); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
kill -0 "$child" 2>/dev/null && fail "rank 1 (pid $child) still runs after SIGTERM to the launcher"

if [[ $failures -ne 0 ]]; then echo "$failures DDP check(s) failed"; exit 1; fi
echo "all DDP checks passed"
