#!/usr/bin/env bash
# DDP under launchers nobody on the team wrote, through the real //trainer:fit binary: torchrun in its default
# (static rendezvous, agent store) mode as 1 node x 2 processes and 2 nodes x 1, Open MPI's mpirun -np 2, and two
# hosts made of two network namespaces joined by a veth pair, each host's name resolving to loopback (127.0.1.1)
# as on a default Debian install. Every run must end with parameters bit-for-bit equal to Kiln's own 2-process run,
# and a host that dies must end the other within --process_group_timeout.
#
# Needs root (network namespaces; the BUILD file runs it outside the sandbox), /usr/bin/torchrun (python3-torch),
# mpirun (openmpi-bin) and ip (iproute2): tools/setup.sh installs them.
set -uo pipefail
fit=$PWD/trainer/cli/fit
compare=$PWD/tests/ddp/compare_checkpoints
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/launchers.XXXXXX")
common=(--max_epochs=2 --num_train=512 --num_val=64 --batch_size=32 --enable_progress_bar=false --log_every_n_steps=0
        --num_sanity_val_steps=0 --num_workers=0 --process_group_timeout=30)
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
last() { find "$1" -name last.ckpt -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-; }
for tool in /usr/bin/torchrun mpirun ip unshare; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing; run tools/setup.sh"; exit 1; }
done
[[ $(id -u) -eq 0 ]] || { echo "FAIL: this test needs root for its network namespaces (CI runs as root)"; exit 1; }
# Debian's torchrun (python3-torch 1.13) starts the command through Python unless told not to, and on Python 3.11 its log
# redirection crashes at exit ("'NoneType' object has no attribute 'get'") unless redirects and tee are set.
torchrun=(/usr/bin/torchrun --no_python --redirects=0:2 --tee=0:2)

echo "== the reference: Kiln's own launcher, 2 processes"
"$fit" "${common[@]}" --devices=2 --strategy=ddp --save_last --default_root_dir="$work/kiln" >"$work/kiln.log" 2>&1 ||
  fail "Kiln's own 2-process run failed: $(tail -3 "$work/kiln.log")"
reference=$(last "$work/kiln")
same() {  # same NAME ROOT: the run's last checkpoint equals the reference bit for bit.
  local checkpoint
  checkpoint=$(last "$2")
  if [[ -z "$checkpoint" ]]; then fail "$1 wrote no checkpoint"; return; fi
  "$compare" "$checkpoint" "$reference" 0 >/dev/null || fail "$1 ended with other parameters than Kiln's own run"
}

# torchrun's agent serves the store in its static mode, and a TCPStore speaks its own PyTorch's protocol: Debian's
# torchrun (1.13) and fit (LibTorch 2.x) cannot share it (the connection is reset). This test then runs torchrun with
# the c10d rendezvous, where rank 0 serves the store; the static mode runs where torchrun's PyTorch has fit's
# LibTorch version (a torchrun of PyTorch 2.11 on the PATH as /usr/bin/torchrun).
fit_libtorch=$("$fit" --version | sed -n -E 's/^LibTorch: built against ([0-9]+\.[0-9]+).*/\1/p')
torchrun_torch=$(/usr/bin/python3 -c 'import torch; print(".".join(torch.__version__.split(".")[:2]))')
c10d_rendezvous=false
mode="default static rendezvous (torchrun's agent serves the store)"
if [[ "$fit_libtorch" != "$torchrun_torch" ]]; then
  c10d_rendezvous=true
  mode="c10d rendezvous: torchrun is PyTorch $torchrun_torch's, fit is built against LibTorch $fit_libtorch, and their store protocols differ"
fi

rendezvous() { if $c10d_rendezvous; then echo "--rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:$1 --rdzv_id=kiln$1"; fi; }
echo "== torchrun, 1 node x 2 processes, $mode"
port=$(free_port)
# shellcheck disable=SC2046  # rendezvous prints nothing or whole flags.
"${torchrun[@]}" $(rendezvous "$port") --nproc_per_node=2 --master_port="$port" \
  "$fit" "${common[@]}" --devices=2 --strategy=ddp \
  --save_last --default_root_dir="$work/torchrun12" >"$work/torchrun12.log" 2>&1 ||
  fail "torchrun 1x2 failed: $(grep -m2 error "$work/torchrun12.log")"
same "torchrun 1x2" "$work/torchrun12"

echo "== torchrun, 2 nodes x 1 process (two agents), $mode"
port=$(free_port)
for node in 0 1; do
  # shellcheck disable=SC2046
  "${torchrun[@]}" $(rendezvous "$port") --nnodes=2 --nproc_per_node=1 \
    --node_rank=$node --master_addr=127.0.0.1 --master_port="$port" \
    "$fit" "${common[@]}" --devices=1 --num_nodes=2 --strategy=ddp --save_last \
    --default_root_dir="$work/torchrun21/node$node" >"$work/torchrun21-$node.log" 2>&1 &
  pids[$node]=$!
done
for node in 0 1; do wait ${pids[$node]} || fail "torchrun 2x1 node $node failed: $(grep -m2 error "$work/torchrun21-$node.log")"; done
same "torchrun 2x1" "$work/torchrun21"  # Under the c10d rendezvous either node may be rank 0.

echo "== mpirun -np 2"
port=$(free_port)
mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" \
  "$fit" "${common[@]}" --devices=2 --strategy=ddp --save_last --default_root_dir="$work/mpirun" >"$work/mpirun.log" 2>&1 ||
  fail "mpirun -np 2 failed: $(grep -m2 error "$work/mpirun.log")"
same "mpirun -np 2" "$work/mpirun"

echo "== two hosts: network namespaces, host names that resolve to loopback"
suffix=$$
host_a=kilnA$suffix host_b=kilnB$suffix
cleanup() {
  ip netns del "$host_a" 2>/dev/null
  ip netns del "$host_b" 2>/dev/null
  rm -rf "/etc/netns/$host_a" "/etc/netns/$host_b"
}
trap cleanup EXIT
ip netns add "$host_a" && ip netns add "$host_b" || { echo "FAIL: cannot create network namespaces"; exit 1; }
ip link add "va$suffix" type veth peer name "vb$suffix"
ip link set "va$suffix" netns "$host_a"
ip link set "vb$suffix" netns "$host_b"
ip -n "$host_a" addr add 10.213.7.1/24 dev "va$suffix"
ip -n "$host_b" addr add 10.213.7.2/24 dev "vb$suffix"
for host in "$host_a" "$host_b"; do
  ip -n "$host" link set lo up
  ip -n "$host" link set "$([[ $host == "$host_a" ]] && echo "va$suffix" || echo "vb$suffix")" up
  # ip netns exec mounts /etc/netns/<name>/hosts over /etc/hosts: the default install's loopback host name.
  mkdir -p "/etc/netns/$host"
  printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$host" >"/etc/netns/$host/hosts"
done
on_host() {  # on_host NAMESPACE NODE_RANK MASTER_ADDR LOG ARGS...: fit on that host, as that host.
  local host=$1 node=$2 master=$3 log=$4
  shift 4
  ip netns exec "$host" unshare --uts env MASTER_ADDR="$master" MASTER_PORT=29555 NODE_RANK="$node" \
    sh -c 'hostname "$0" && exec "$@"' "$host" "$fit" "${common[@]}" --devices=1 --num_nodes=2 "$@" >"$log" 2>&1
}
on_host "$host_a" 0 10.213.7.1 "$work/host-a.log" --save_last --default_root_dir="$work/host-a" &
a=$!
on_host "$host_b" 1 10.213.7.1 "$work/host-b.log" --default_root_dir="$work/host-b" &
b=$!
wait $a || fail "host A failed: $(grep -m2 error "$work/host-a.log")"
wait $b || fail "host B failed: $(grep -m2 error "$work/host-b.log")"
same "two hosts" "$work/host-a"
# The control: with Gloo on loopback (what PyTorch's default device picks here, and what Kiln did), the hosts
# never meet; GLOO_SOCKET_IFNAME is honoured. Both have checked in, so this is Gloo's own connect wait, which must
# end within the timeout too. The timeouts waited out here are short ones that still leave both hosts time to start
# and check in; the margin over them (5 s) is the one these checks always had.
start=$(date +%s.%N)
GLOO_SOCKET_IFNAME=lo on_host "$host_a" 0 10.213.7.1 "$work/lo-a.log" --default_root_dir="$work/lo-a" \
  --process_group_timeout=6 &
a=$!
GLOO_SOCKET_IFNAME=lo on_host "$host_b" 1 10.213.7.1 "$work/lo-b.log" --default_root_dir="$work/lo-b" \
  --process_group_timeout=6 &
b=$!
wait $a; code_a=$?
wait $b; code_b=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
[[ $code_a -ne 0 && $code_b -ne 0 ]] || fail "GLOO_SOCKET_IFNAME=lo did not strand the hosts: the check cannot fail"
echo "GLOO_SOCKET_IFNAME=lo: both hosts failed ($code_a, $code_b) in ${elapsed} s, as they must"
for log in "$work/lo-a.log" "$work/lo-b.log"; do
  echo "  $(grep -m1 '^error' "$log" | cut -c1-200)"
  grep -q "could not meet the other ranks at 10.213.7.1:29555 within 6s" "$log" ||
    fail "$log: the error does not say what it waited for"
done
(( $(echo "$elapsed < 11" | bc) )) || fail "GLOO_SOCKET_IFNAME=lo: took ${elapsed} s with a 6 s timeout"

echo "== timeouts are bounds: --process_group_timeout=3 ends in under 8 s"
# bound_case NAME NODE MASTER: one rank alone, on host A as rank 0 or on host B as rank 1, must fail within the
# timeout; prints what happened and returns the number of failed checks.
bound_case() {
  local name=$1 node=$2 master=$3 host start code elapsed failed=0
  host=$([[ $node == 0 ]] && echo "$host_a" || echo "$host_b")
  start=$(date +%s.%N)
  on_host "$host" "$node" "$master" "$work/$name.log" --default_root_dir="$work/$name" --process_group_timeout=3
  code=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  echo "$name: exit $code after ${elapsed} s: $(grep -m1 '^error' "$work/$name.log" | cut -c1-150)"
  [[ $code -ne 0 ]] || { echo "FAIL: $name: exit 0 without a peer"; failed=$((failed + 1)); }
  (( $(echo "$elapsed < 8" | bc) )) || { echo "FAIL: $name: took ${elapsed} s with a 3 s timeout"; failed=$((failed + 1)); }
  grep -q "could not meet the other ranks at $master:29555 within 3s" "$work/$name.log" ||
    { echo "FAIL: $name: the error does not say what it waited for"; failed=$((failed + 1)); }
  return $failed
}
# "unreachable" (host B, towards an address nobody has) runs beside "alone-0" (host A): they wait on different
# addresses. "alone-1" (host B, towards host A) runs after alone-0, which it would otherwise meet.
bound_case unreachable 1 10.213.7.9 &
unreachable=$!
bound_case alone-0 0 10.213.7.1 || failures=$((failures + $?))
bound_case alone-1 1 10.213.7.1 || failures=$((failures + $?))
wait $unreachable || failures=$((failures + $?))

echo "== a killed host ends the other within the timeout"
on_host "$host_a" 0 10.213.7.1 "$work/kill-a.log" --default_root_dir="$work/kill-a" --max_epochs=1000 \
  --process_group_timeout=10 &
a=$!
on_host "$host_b" 1 10.213.7.1 "$work/kill-b.log" --default_root_dir="$work/kill-b" --max_epochs=1000 \
  --process_group_timeout=10 &
b=$!
for _ in $(seq 1 300); do grep -q "joined at" "$work/kill-b.log" && break; sleep 0.05; done
sleep 1
pkill -KILL -f "default_root_dir=$work/kill-a"
start=$SECONDS
wait $b
code=$?
elapsed=$((SECONDS - start))
wait $a 2>/dev/null
echo "host B after host A was killed: exit $code after ${elapsed} s: $(grep -m1 '^error' "$work/kill-b.log" | cut -c1-150)"
[[ $code -ne 0 ]] || fail "host B exited 0 although host A was killed"
[[ $elapsed -lt 15 ]] || fail "host B took ${elapsed} s to end with a 10 s timeout"

if [[ $failures -ne 0 ]]; then echo "$failures launcher check(s) failed"; exit 1; fi
echo "torchrun (1x2, 2x1), mpirun and two hosts trained bit-equal to Kiln's own run; timeouts held"
