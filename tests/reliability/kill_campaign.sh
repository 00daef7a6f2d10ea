#!/usr/bin/env bash
# SIGKILL campaign through the real //trainer:fit binary: nothing is lost, whenever the kill lands.
#
#   kill_campaign.sh [--moments=N] [--seed=S]        (defaults: 24 moments, seed 1)
#
# One uninterrupted run first. Then, for each moment a seeded generator picks, the same run in a fresh folder,
# killed with SIGKILL at that moment: half the moments land while a checkpoint is being written (a chosen write, and
# a delay after its temporary file appears), half during training (a delay after the first checkpoint). Checkpoints
# are large (about 13 MB: --hidden_sizes=1024,1024 with Adam's state) and frequent (every 2 steps, plus last.ckpt),
# and a background thread writes them, so a kill often lands inside a write. After each kill:
#   1. every *.ckpt file left is complete (tests/reliability/verify_checkpoints: it loads, every CRC-32 matches);
#   2. the run resumed with --ckpt_path=last succeeds, from a checkpoint of that folder;
#   3. the resumed run ends with parameters bit-for-bit equal to the uninterrupted run's (params_sha256);
#   4. the resumed run removed the temporary files the kill left (trainer/checkpoint/checkpoint_io.h).
# Prints one line per moment and a summary; exit status 1 if any moment fails.
set -uo pipefail
moments=24
seed=1
for argument in "$@"; do
  case "$argument" in
    --moments=*) moments=${argument#--moments=} ;;
    --seed=*) seed=${argument#--seed=} ;;
    *) echo "usage: $0 [--moments=N] [--seed=S]" >&2; exit 2 ;;
  esac
done
runfiles=${RUNFILES_DIR:+$RUNFILES_DIR/kiln}
cd "${runfiles:-.}" 2>/dev/null || true
fit=trainer/cli/fit
kill_at=tests/reliability/kill_at
verify=tests/reliability/verify_checkpoints
work=${TEST_TMPDIR:-$(mktemp -d)}
run=(--logger=none --report=false --hidden_sizes=1024,1024 --every_n_train_steps=2 --max_epochs=2 --num_train=4096 --num_val=256
     --enable_progress_bar=false --log_every_n_steps=0)
field() { sed -n -E "s/.*\"$2\": \"?([^\",}]*)\"?.*/\1/p" "$1"; }

$fit "${run[@]}" --default_root_dir="$work/reference" --summary_json="$work/reference.json" >"$work/reference.log" 2>&1 ||
  { echo "FAIL: the uninterrupted run failed: $(tail -3 "$work/reference.log")"; exit 1; }
reference=$(field "$work/reference.json" params_sha256)
steps=$(field "$work/reference.json" global_step)
wall_ms=$(awk -v s="$(field "$work/reference.json" wall_time_seconds)" 'BEGIN {printf "%d", s * 1000}')
# Each save writes the step checkpoint and last.ckpt; saves come every 2 steps.
writes=$(( steps / 2 * 2 ))
echo "uninterrupted: $steps steps in ${wall_ms} ms, $writes checkpoint writes, params_sha256 $reference"

RANDOM=$seed
failures=0
in_write=0
missed=0
leftover=0
for ((i = 1; i <= moments; i++)); do
  dir=$work/moment$i
  if ((i % 2 == 1)); then
    # Skip the first two writes, so that an older checkpoint always exists to fall back on.
    moment=(--during_write=$(( 3 + RANDOM % (writes - 4) )) --delay_us=$(( RANDOM % 3000 )))
  else
    moment=(--after_checkpoint_ms=$(( RANDOM % (wall_ms * 8 / 10 + 1) )))
  fi
  result=$($kill_at --watch="$dir/checkpoints" "${moment[@]}" -- \
    $fit "${run[@]}" --default_root_dir="$dir" --summary_json="$dir/killed.json" 2>"$dir.killed.log")
  if [[ $result == missed* ]]; then
    echo "moment $i (${moment[*]}): the run ended first ($result); not counted"
    missed=$((missed + 1))
    continue
  fi
  [[ $result == *in_write=1* ]] && in_write=$((in_write + 1))
  tmp=$(sed -n -E 's/.*tmp_files=([0-9]+).*/\1/p' <<<"$result")
  leftover=$((leftover + tmp))
  problem=""
  shopt -s nullglob
  checkpoints=("$dir"/checkpoints/*.ckpt)
  shopt -u nullglob
  if [[ ${#checkpoints[@]} -eq 0 ]]; then
    problem="no checkpoint was left"
  elif ! $verify "${checkpoints[@]}" >"$dir.verify.log" 2>&1; then
    problem="a checkpoint is incomplete: $(grep BROKEN "$dir.verify.log" | head -1)"
  elif ! $fit "${run[@]}" --default_root_dir="$dir" --ckpt_path=last --summary_json="$dir/resumed.json" \
      >"$dir.resumed.log" 2>&1; then
    problem="the resumed run failed: $(grep -m1 '^error' "$dir.resumed.log")"
  elif [[ $(field "$dir/resumed.json" resumed_from) != "$dir/checkpoints/"* ]]; then
    problem="the resumed run did not resume from this folder's checkpoints"
  elif [[ $(field "$dir/resumed.json" params_sha256) != "$reference" ]]; then
    problem="the resumed run's parameters differ from the uninterrupted run's"
  elif compgen -G "$dir/checkpoints/*.tmp-*" >/dev/null; then
    problem="the resumed run left the killed run's temporary files: $(ls "$dir/checkpoints" | grep tmp- | head -3)"
  fi
  from=$(basename "$(field "$dir/resumed.json" resumed_from 2>/dev/null)" 2>/dev/null)
  if [[ -n $problem ]]; then
    echo "FAIL moment $i (${moment[*]}): $result: $problem"
    failures=$((failures + 1))
  else
    echo "ok   moment $i (${moment[*]}): $result; resumed from $from, bit-for-bit equal"
  fi
done
counted=$((moments - missed))
echo "summary: seed $seed, $counted moments ($in_write inside a checkpoint write), $failures failed, $missed missed;" \
  "$leftover temporary file(s) left by the kills, all removed by the resumed runs"
[[ $failures -eq 0 && $counted -gt 0 ]]
