#!/usr/bin/env bash
# ThroughputMonitor, Kiln's beside the real Lightning's (2.x from PyPI, tools/setup.sh): the same fit (throughput.py in
# Lightning, throughput_monitor.cc, a user's program, in Kiln) on 1 process and on 2 (DDP over Gloo) logs the same
# throughput keys at the same steps to metrics.csv; Kiln's FLOP counter gives the FLOPs per batch Lightning's
# measure_flops (PyTorch's FlopCounterMode) gives for the same model; and Kiln's Throughput computes Lightning's
# values for the same updates.
set -uo pipefail
kiln=$PWD/tests/lightning/throughput_monitor
script=$PWD/tests/lightning/throughput.py
source "$PWD/tests/lightning/common.sh"

# "STEP KEY" for every throughput key (those with a "/") set in a row of metrics.csv, sorted and unique.
keys() {
  python3 - "$1" <<'PY'
import csv, sys
rows = csv.DictReader(open(sys.argv[1]))
print("\n".join(sorted({f"{r['step']} {k}" for r in rows for k, v in r.items() if v != "" and "/" in k})))
PY
}

for devices in 1 2; do
  lightning "$script" fit "$work/lightning_$devices" "$devices" >lightning_$devices.txt ||
    { fail "Lightning's run on $devices process(es) failed"; continue; }
  "$kiln" "$work/kiln_$devices" "$devices" >kiln_$devices.txt 2>kiln_$devices.err ||
    { tail -5 kiln_$devices.err; fail "Kiln's run on $devices process(es) failed"; continue; }
  lightning_csv=$(sed -n 's/^csv //p' lightning_$devices.txt)
  kiln_csv=$(ls "$work"/kiln_$devices/lightning_logs/version_*/metrics.csv | head -1)
  keys "$lightning_csv" >lightning_keys_$devices.txt
  keys "$kiln_csv" >kiln_keys_$devices.txt
  [[ -s lightning_keys_$devices.txt ]] || fail "Lightning logged no throughput on $devices process(es)"
  if ! diff -u lightning_keys_$devices.txt kiln_keys_$devices.txt >keys_$devices.diff; then
    echo "On $devices process(es) the logged throughput keys differ (- Lightning, + Kiln):"
    cat keys_$devices.diff
    fail "Kiln logs other throughput keys or steps than Lightning on $devices process(es)"
  fi
  if ! diff <(grep '^flops ' lightning_$devices.txt) <(grep '^flops ' kiln_$devices.txt) >flops_$devices.diff; then
    echo "FLOPs per batch (< Lightning's measure_flops, > Kiln's FlopCounter):"
    cat flops_$devices.diff
    fail "Kiln counts other FLOPs than PyTorch's FlopCounterMode"
  fi
done

lightning "$script" compute >lightning_compute.txt || fail "Lightning's Throughput failed"
"$kiln" --compute >kiln_compute.txt || fail "Kiln's Throughput failed"
python3 - lightning_compute.txt kiln_compute.txt <<'PY' || fail "Kiln's Throughput computes other values than Lightning's"
import math, sys
def read(path):
    return {(w, k): float(v) for w, k, v in (line.split() for line in open(path))}
lightning, kiln = read(sys.argv[1]), read(sys.argv[2])
if lightning.keys() != kiln.keys():
    sys.exit(f"keys differ: Lightning only {sorted(lightning.keys() - kiln.keys())}, Kiln only {sorted(kiln.keys() - lightning.keys())}")
for key in lightning:
    if not math.isclose(lightning[key], kiln[key], rel_tol=1e-12):
        sys.exit(f"{key}: Lightning {lightning[key]}, Kiln {kiln[key]}")
PY

finish "the same throughput keys at the same steps on 1 process ($(wc -l <kiln_keys_1.txt) step/key pairs) and on 2" \
  "($(wc -l <kiln_keys_2.txt)); FLOPs per batch $(grep '^flops' kiln_1.txt | tr '\n' ' ')as FlopCounterMode counts;" \
  "Throughput's $(wc -l <kiln_compute.txt) values as Lightning computes them"
