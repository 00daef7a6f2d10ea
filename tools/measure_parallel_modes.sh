#!/usr/bin/env bash
# Memory per rank and step time of each distributed mode at N = 1, 2 and 4 processes, printed as the markdown table of
# docs/distributed.md ("Memory and step time by mode"). Each run trains examples/real_models/tp_gpt (a GPT written
# with Kiln's tensor-parallel layers, so one program runs under every mode) on virtual NPUs, which count their
# allocator's peak (memory_allocated_peak_bytes), with report=FILE: each rank writes its peak over the run and the
# wall-clock seconds of each training step.
#
#   bazel build //examples/real_models:tp_gpt
#   tools/measure_parallel_modes.sh [--tp_gpt=PATH] [--sizes="1 2 4"] [--repeat=1] [--warmup=3] [--global_batch=8]
#                                 [key=value...]
#
# key=value arguments go to every tp_gpt run (the model's size: dim=, heads=, layers=, vocab=; epochs=). Every mode
# trains the same global batches (--global_batch, 8 by default, of tp_gpt's 64 sequences): tp_gpt's global_batch= is
# the per-process batch under ddp and fsdp, so those get global_batch / N, and model_parallel the global batch itself
# (tp_gpt divides it by the data-parallel size).
# heads and vocab must be divisible by 4 for tensor parallelism at 4 ranks (each rank holds heads / tp heads and
# vocab / tp of the head's rows).
#
# The columns: "peak memory per rank" is the largest of the ranks' peaks (MB = 10^6 bytes): everything the device
# held at once, from the model's placement through the last step (parameters, gradients, the optimizer's state, the
# activations, the collectives' buffers). "step time" is the median over the steps after the first `warmup` of each
# step's time, a step's time being the slowest rank's (forward, backward, the gradients' collectives and the optimizer
# step; a rank's step ends when its collectives have everyone's part). With --repeat=K each mode runs K times and the
# lowest median is printed (the peak is the same from run to run). A mode that fails prints "not supported" and the
# error's last line in its cells, and the script goes on; it exits 1 only where its own arguments are wrong.
#
# The processes of a run share the machine's cores: where N exceeds them, the step times measure contention.
set -uo pipefail
tp_gpt=""
sizes="1 2 4"
repeat=1
warmup=3
global_batch=8
extra=()
for arg in "$@"; do
  case $arg in
    --tp_gpt=*) tp_gpt=${arg#--tp_gpt=} ;;
    --sizes=*) sizes=${arg#--sizes=} ;;
    --repeat=*) repeat=${arg#--repeat=} ;;
    --warmup=*) warmup=${arg#--warmup=} ;;
    --global_batch=*) global_batch=${arg#--global_batch=} ;;
    --*)
      echo "measure_parallel_modes: unknown flag '$arg' (--tp_gpt=, --sizes=, --repeat=, --warmup=, --global_batch=)" >&2
      exit 1
      ;;
    global_batch=*) echo "measure_parallel_modes: pass --global_batch=, which each mode divides as it must" >&2; exit 1 ;;
    *=*) extra+=("$arg") ;;
    *) echo "measure_parallel_modes: '$arg' is neither a flag nor a tp_gpt key=value" >&2; exit 1 ;;
  esac
done
if [[ -z $tp_gpt ]]; then
  tp_gpt=$(cd "$(dirname "$0")/.." && pwd)/bazel-bin/examples/real_models/tp_gpt
fi
if [[ ! -x $tp_gpt ]]; then
  echo "measure_parallel_modes: no tp_gpt program at $tp_gpt: build //examples/real_models:tp_gpt, or pass --tp_gpt=PATH" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export VIRTUAL_NPU_DEVICES=4

# One row: MODE N ARGS... Prints "| MODE | N | peak | step |".
row() {
  local mode=$1 n=$2
  shift 2
  local name best="" peak="" reason=""
  for ((k = 0; k < repeat; ++k)); do
    name="$work/run$RANDOM$k"
    if ! timeout 600 "$tp_gpt" "$name.loss" accelerator=virtual_npu devices="$n" "$@" "${extra[@]}" report="$name" \
      >"$name.out" 2>"$name.err"; then
      reason=$(grep -v -E '^[IW][0-9]{4} |^WARNING: Logging' "$name.err" | grep -v '^\s*$' | tail -1 | cut -c1-200)
      break
    fi
    local figures
    figures=$(python3 - "$name" "$n" "$warmup" <<'PY'
import statistics, sys
name, n, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
peaks, steps = [], []
for rank in range(n):
    for line in open(f"{name}.rank{rank}.txt"):
        key, *values = line.split()
        if key == "peak_bytes":
            peaks.append(int(values[0]))
        elif key == "step_seconds":
            steps.append([float(v) for v in values])
assert len(steps) == n and len({len(s) for s in steps}) == 1, "the ranks ran different numbers of steps"
assert len(steps[0]) > warmup, f"{len(steps[0])} steps, not more than the {warmup} left out"
slowest = [max(times) for times in zip(*steps)][warmup:]
print(max(peaks) if len(peaks) == n else -1, statistics.median(slowest))
PY
    ) || { reason="its report could not be read"; break; }
    peak=${figures% *}
    local median=${figures#* }
    if [[ -z $best ]] || python3 -c "import sys; sys.exit(not $median < $best)"; then best=$median; fi
  done
  if [[ -n $reason ]]; then
    echo "| $mode | $n | not supported: ${reason//|/\\|} | not supported |"
  else
    python3 -c "import sys; p, s = int(sys.argv[1]), float(sys.argv[2]); print(f'| $mode | $n | ' + (f'{p / 1e6:.2f} MB' if p >= 0 else 'not counted') + f' | {s * 1e3:.1f} ms |')" "$peak" "$best"
  fi
}

echo "load average before: $(uptime | sed 's/.*load average: //')"
echo
echo "| mode | N | peak memory per rank | median step time |"
echo "| --- | ---: | ---: | ---: |"
row single_device 1 strategy=single_device global_batch="$global_batch"
for n in $sizes; do
  if ((global_batch % n != 0)); then
    echo "measure_parallel_modes: --global_batch=$global_batch is not divisible by N = $n" >&2
    exit 1
  fi
  per_rank=global_batch=$((global_batch / n))
  row ddp "$n" strategy=ddp "$per_rank"
  row "fsdp (FULL_SHARD)" "$n" strategy=fsdp auto_wrap_policy=TpGptBlock "$per_rank"
  row "fsdp, bf16-mixed" "$n" strategy=fsdp auto_wrap_policy=TpGptBlock precision=bf16-mixed "$per_rank"
  row "model_parallel, tp = $n" "$n" strategy=model_parallel data_parallel_size=1 tensor_parallel_size="$n" \
    global_batch="$global_batch"
  if ((n == 4)); then
    row "model_parallel, dp 2 x tp 2" 4 strategy=model_parallel data_parallel_size=2 tensor_parallel_size=2 \
      global_batch="$global_batch"
  fi
  row "model_parallel, tp = $n, bf16-mixed" "$n" strategy=model_parallel data_parallel_size=1 \
    tensor_parallel_size="$n" precision=bf16-mixed global_batch="$global_batch"
done
echo
echo "load average after: $(uptime | sed 's/.*load average: //')"
