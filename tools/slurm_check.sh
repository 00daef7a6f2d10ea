#!/usr/bin/env bash
# Kiln's DDP under a real SLURM, outside CI: brings up a one-node cluster (Debian's slurm-wlm and munge) in a
# scratch folder, runs fit through `srun` and `sbatch`, a program with several entry points through `srun`
# (tests/ddp/entry_points.cc: every task takes part in each, and the tasks agree), kills one task of a running job,
# prints what it measured, and stops every daemon it started by its process id. Needs root (munged and slurmd) and the
# packages:
#
#   apt-get install slurm-wlm munge        # ~25 MB download
#   bazel build //trainer:fit //tests/ddp:entry_points && tools/slurm_check.sh
#
# Figures from a run are in docs/distributed.md ("Distributed training", SLURM). Exit status: 0 when every check
# held.
set -uo pipefail
cd "$(dirname "$0")/.."
fit=${KILN_FIT:-$PWD/bazel-bin/trainer/cli/fit}
entry_points=${KILN_ENTRY_POINTS:-$PWD/bazel-bin/tests/ddp/entry_points}
for tool in slurmctld slurmd munged mungekey srun sbatch; do
  command -v "$tool" >/dev/null || { echo "slurm_check: $tool is missing; apt-get install slurm-wlm munge" >&2; exit 2; }
done
[[ -x "$fit" ]] || { echo "slurm_check: no $fit; bazel build //trainer:fit first" >&2; exit 2; }
[[ -x "$entry_points" ]] ||
  { echo "slurm_check: no $entry_points; bazel build //tests/ddp:entry_points first" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "slurm_check: run as root (munged and slurmd need it)" >&2; exit 2; }

dir=$(mktemp -d /tmp/kiln-slurm.XXXXXX)
chmod 755 "$dir"
host=$(hostname -s)
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$dir"
}
trap stop EXIT

mkdir -p "$dir"/{state,spool,log,munge}
chmod 700 "$dir/munge"
mungekey --create --keyfile="$dir/munge/munge.key" --force
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" --pid-file="$dir/munge/munged.pid" \
  --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" --force
for _ in $(seq 1 50); do [[ -s "$dir/munge/munged.pid" ]] && break; sleep 0.1; done
pids+=("$(cat "$dir/munge/munged.pid")")

ports=$(/usr/bin/python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
read -r ctld_port d_port <<<"$ports"
cat >"$dir/slurm.conf" <<CONF
ClusterName=kiln
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobCompType=jobcomp/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=kiln Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" -D >"$dir/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -f "$SLURM_CONF" -D >"$dir/log/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.2; done
sinfo -h -o %t | grep -q idle || { fail "the node never became idle: $(tail -3 "$dir/log/slurmctld.log")"; exit 1; }
echo "a one-node SLURM is up ($(sinfo -h -o '%P %D %t'), slurm $(slurmctld -V | cut -d' ' -f2))"

common=(--max_epochs=2 --num_train=512 --num_val=64 --batch_size=32 --enable_progress_bar=false --num_workers=0
        --process_group_timeout=30)
echo "== srun --ntasks=2 --ntasks-per-node=2"
start=$(date +%s.%N)
srun --ntasks=2 --ntasks-per-node=2 --oversubscribe --kill-on-bad-exit=1 "$fit" "${common[@]}" --devices=2 \
  --strategy=ddp --default_root_dir="$dir/srun" --summary_json="$dir/srun.json" >"$dir/srun.log" 2>&1 ||
  fail "srun failed: $(grep -m2 error "$dir/srun.log")"
echo "srun: $(echo "$(date +%s.%N) - $start" | bc) s; $(grep -o '"cluster_environment": "[a-z]*"' "$dir/srun.json")"
grep -q '"cluster_environment": "slurm"' "$dir/srun.json" || fail "srun's processes did not see SLURM's variables"

echo "== sbatch --wait"
cat >"$dir/job.sh" <<JOB
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --ntasks-per-node=2
#SBATCH --oversubscribe
srun $fit ${common[*]} --devices=2 --strategy=ddp --default_root_dir=$dir/sbatch --summary_json=$dir/sbatch.json
JOB
start=$(date +%s.%N)
sbatch --wait --output="$dir/sbatch.log" "$dir/job.sh" >/dev/null || fail "the sbatch job failed: $(tail -3 "$dir/sbatch.log")"
echo "sbatch: $(echo "$(date +%s.%N) - $start" | bc) s"
[[ -f "$dir/sbatch.json" ]] || fail "the sbatch job wrote no summary"

echo "== a program's entry points under srun: fit, validate, test, predict, and a second Trainer's fit"
mkdir -p "$dir/entry_points"
start=$(date +%s.%N)
srun --ntasks=2 --ntasks-per-node=2 --oversubscribe --kill-on-bad-exit=1 "$entry_points" "$dir/entry_points" cpu 2 \
  validate,fit,validate,test,predict,new,fit >"$dir/entry_points.log" 2>&1 ||
  fail "the program failed under srun: $(grep -v '^[IW][0-9]' "$dir/entry_points.log" | tail -3)"
echo "entry points under srun: $(echo "$(date +%s.%N) - $start" | bc) s"
for rank in 0 1; do
  grep -qx "before global=$rank local=$rank node=0 world=2 zero=$((rank == 0 ? 1 : 0))" "$dir/entry_points/rank$rank.txt" ||
    fail "task $rank's rank API before the first entry point: $(head -1 "$dir/entry_points/rank$rank.txt" 2>&1)"
done
cmp -s <(grep -v '^before \|^after \|^training_step saw' "$dir/entry_points/rank0.txt") \
  <(grep -v '^before \|^after \|^training_step saw' "$dir/entry_points/rank1.txt") ||
  fail "the two tasks ended the program differently"
[[ $(grep -cE '^(validate|fit|test|predict) ' "$dir/entry_points/rank1.txt") -eq 6 ]] ||
  fail "task 1 did not take part in the 6 entry points"

echo "== a killed task ends the job"
srun --ntasks=2 --ntasks-per-node=2 --oversubscribe "$fit" "${common[@]}" --max_epochs=100000 --devices=2 \
  --strategy=ddp --default_root_dir="$dir/killed" >"$dir/killed.log" 2>&1 &
job=$!
for _ in $(seq 1 300); do [[ $(grep -c "joined at" "$dir/killed.log") -ge 2 ]] && break; sleep 0.1; done
victim=$(pgrep -f "default_root_dir=$dir/killed" | while read -r pid; do
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -q '^SLURM_PROCID=1$' && echo "$pid"; done | head -1)
[[ -n "$victim" ]] || fail "no task with SLURM_PROCID=1 to kill"
kill -9 "$victim"
start=$(date +%s.%N)
wait $job
code=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
echo "killed task 1: the job ended with exit $code after $elapsed s: $(grep -m1 '^error' "$dir/killed.log" | cut -c1-160)"
[[ $code -ne 0 ]] || fail "the job exited 0 after a task was killed"
(( $(echo "$elapsed < 35" | bc) )) || fail "the job took $elapsed s to end with a 30 s timeout"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "SLURM: srun, sbatch, a program's entry points and a killed task held"
