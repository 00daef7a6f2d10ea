#!/usr/bin/env bash
# Exact resumption after SIGKILL, through the real //trainer:fit binary on CPU:
#   1. an uninterrupted run;
#   2. the same run, killed with SIGKILL part-way through (after it has written checkpoints);
#   3. that run resumed with --ckpt_path=last.
# The resumed run must end with parameters bit-for-bit equal to the uninterrupted one (params_sha256).
set -uo pipefail
fit=trainer/cli/fit
work=${TEST_TMPDIR:-$(mktemp -d)}
common=(--max_epochs=4 --num_train=32768 --every_n_train_steps=50 --save_last --enable_progress_bar=false
        --log_every_n_steps=0)
fail() { echo "FAIL: $1"; exit 1; }
field() { sed -n -E "s/.*\"$2\": \"?([^\",}]*)\"?.*/\1/p" "$1"; }

$fit "${common[@]}" --default_root_dir="$work/a" --summary_json="$work/a.json" >"$work/a.log" 2>&1 ||
  fail "uninterrupted run failed: $(tail -5 "$work/a.log")"

# The moment to kill: a fixed pseudo-random delay after the first checkpoint appears (seeded, so reruns agree).
RANDOM=20261129
delay_ms=$((100 + RANDOM % 400))
$fit "${common[@]}" --default_root_dir="$work/b" --summary_json="$work/b-killed.json" >"$work/b1.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
  [[ -f "$work/b/lightning_logs/version_0/checkpoints/last.ckpt" ]] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.01
done
sleep "$(printf '0.%03d' $delay_ms)"
kill -0 $pid 2>/dev/null || fail "the run ended before it could be killed; make it longer ($(tail -3 "$work/b1.log"))"
kill -KILL $pid
wait $pid 2>/dev/null
[[ -f "$work/b-killed.json" ]] && fail "the killed run still wrote its summary: it was not killed mid-run"
echo "killed the run ${delay_ms} ms after its first checkpoint; checkpoints left:"
ls "$work/b/lightning_logs/version_0/checkpoints"

$fit "${common[@]}" --default_root_dir="$work/b" --ckpt_path=last --summary_json="$work/b.json" >"$work/b2.log" 2>&1 ||
  fail "resumed run failed: $(tail -5 "$work/b2.log")"
grep -o "Restored from checkpoint .*" "$work/b2.log" || fail "the resumed run did not say which checkpoint it restored"

resumed_from=$(field "$work/b.json" resumed_from)
[[ "$resumed_from" == "$work/b/lightning_logs/version_0/checkpoints/"* ]] || fail "resumed_from is '$resumed_from'"
# The resumed run logs into the next version folders, as Lightning's loggers do: the killed run's CSV and TensorBoard
# loggers took version_0 and version_1, so the resumed run's CSV logger (its run folder) takes version_2.
[[ $(field "$work/b.json" log_dir) == "$work/b/lightning_logs/version_2" ]] || fail "log_dir is not version_2"
[[ $(field "$work/b.json" global_step) == $(field "$work/a.json" global_step) ]] || fail "global steps differ"
a=$(field "$work/a.json" params_sha256)
b=$(field "$work/b.json" params_sha256)
echo "uninterrupted params_sha256: $a"
echo "resumed       params_sha256: $b"
[[ ${#a} -eq 64 ]] || fail "no params_sha256 in the uninterrupted run's summary"
[[ "$a" == "$b" ]] || fail "the resumed run's parameters differ from the uninterrupted run's"
echo "resumed run matches the uninterrupted run bit for bit"
