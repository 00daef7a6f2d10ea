#!/usr/bin/env bash
# Hostile input through the real //trainer:fit binary, one check per class of failure (docs/reliability.md):
#  1. runs never lose each other's data: two fits started at once in one folder get two complete run folders, and a
#     resume from another run's checkpoint (or from a moved folder) writes where this run's flags say and leaves the
#     other run's files byte for byte;
#  2. inputs too large for memory are errors (exit 2), never aborts;
#  3. flag files, variables and arguments after "--" meet the command line's checks: one error line, exit 2;
#  4. data in other encodings or line endings, and NaN labels, are read right or refused, never misread;
#  5. outputs that cannot be written, or that are an input, are refused before training (exit 2), and a symbolic link
#     is written through;
#  6. checkpoints whose pickle lies about its tensors or nests without bound are refused (exit 2), never a crash;
#  7. what can be checked before the first step is (schedules over the whole run, monitors): exit 2, nothing written.
set -uo pipefail
fit=$PWD/trainer/cli/fit
corpus=$PWD/tests/fuzz/corpus/checkpoint_reader
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/hostile.XXXXXX")
cd "$work" || exit 1
# One logger, so that a run is one version folder (with two, each logger takes a version of its own, as in Lightning).
quick=(--max_epochs=2 --num_train=256 --num_val=64 --enable_progress_bar=false --num_workers=0 --logger=csv)
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

# refused NAME EXPECTED ARGS...: fit must exit 2 with exactly one "error:" line containing EXPECTED, write nothing
# under the run's root, and train nothing.
refused() {
  local name=$1 expected=$2
  shift 2
  rm -rf "$work/untouched"
  "$fit" "${quick[@]}" --default_root_dir="$work/untouched" "$@" >"$work/$name.log" 2>&1
  local code=$?
  local errors
  errors=$(grep -c '^error: ' "$work/$name.log")
  echo "$name: exit $code; $(grep -m1 '^error: ' "$work/$name.log" | cut -c1-160)"
  [[ $code -eq 2 ]] || fail "$name: exit status $code, not 2 (last line: $(tail -1 "$work/$name.log" | cut -c1-200))"
  [[ $errors -eq 1 ]] || fail "$name: $errors error lines, not 1"
  grep -qF -- "$expected" "$work/$name.log" || fail "$name: no '$expected' in: $(grep -m1 error "$work/$name.log")"
  grep -q '^Trained on' "$work/$name.log" && fail "$name: it trained"
  [[ ! -e "$work/untouched" ]] || fail "$name: it wrote $(find "$work/untouched" | head -3 | tr '\n' ' ')"
}

# --- 1. Data loss ---------------------------------------------------------------------------------------------
for attempt in 1 2 3; do
  rm -rf same
  "$fit" "${quick[@]}" --default_root_dir=same --seed=1 >"same-a.log" 2>&1 &
  "$fit" "${quick[@]}" --default_root_dir=same --seed=2 >"same-b.log" 2>&1 &
  wait
  versions=$(ls same/lightning_logs | tr '\n' ' ')
  [[ "$versions" == "version_0 version_1 " ]] || fail "attempt $attempt: two runs at once made: $versions"
  for v in 0 1; do
    rows=$(grep -c '' "same/lightning_logs/version_$v/metrics.csv")
    seeds=$(grep -c '^seed:' "same/lightning_logs/version_$v/hparams.yaml")
    [[ -f "same/lightning_logs/version_$v/checkpoints/epoch=1-step=8.ckpt" ]] || fail "version_$v lost its checkpoint"
    [[ $seeds -eq 1 ]] || fail "version_$v's hparams.yaml holds $seeds seeds"
    # One header, and per epoch: 8 steps logged every 50 (none), one validation row and one epoch row: 5 lines.
    [[ $rows -eq 5 ]] || fail "version_$v/metrics.csv has $rows lines, not 5 (rows of two runs mixed?)"
  done
  [[ $(grep -h '^seed:' same/lightning_logs/version_*/hparams.yaml | sort -u | wc -l) -eq 2 ]] ||
    fail "attempt $attempt: the two folders are not the two runs"
done
echo "two runs at once: two complete run folders, 3 of 3 attempts"

"$fit" "${quick[@]}" --default_root_dir=A >A.log 2>&1 || fail "run A failed"
(cd A && find . -type f -exec sha256sum {} + | sort) >A.before
"$fit" "${quick[@]}" --max_epochs=4 --default_root_dir=B \
  --ckpt_path=A/lightning_logs/version_0/checkpoints/last.ckpt >B.log 2>&1 || fail "resuming A into B failed"
(cd A && find . -type f -exec sha256sum {} + | sort) >A.after
cmp -s A.before A.after || fail "resuming A's checkpoint into B changed A: $(diff A.before A.after | head -3)"
[[ -f B/lightning_logs/version_0/checkpoints/epoch=3-step=16.ckpt ]] || fail "B has no checkpoint of its own"
echo "a resume from another run's checkpoint wrote only under its own --default_root_dir"

mv A moved
# A write killed midway leaves its temporary file (<name>.tmp-<pid>) beside the checkpoint or in the run folder; the
# resume removes those of processes that no longer run, and leaves a live process's alone.
true &
dead=$!
wait "$dead"
for stale in checkpoints/last.ckpt checkpoints/epoch=1-step=8.ckpt hparams.yaml; do
  head -c 1000 /dev/urandom >"moved/lightning_logs/version_0/$stale.tmp-$dead"
done
touch "moved/lightning_logs/version_0/checkpoints/last.ckpt.tmp-$$"
"$fit" "${quick[@]}" --max_epochs=3 --default_root_dir=moved --ckpt_path=last >moved.log 2>&1 ||
  fail "resuming a moved folder failed"
left=$(find moved -name "*.tmp-$dead" | tr '\n' ' ')
[[ -z "$left" ]] || fail "the resume left a killed write's temporary files: $left"
[[ -f "moved/lightning_logs/version_0/checkpoints/last.ckpt.tmp-$$" ]] ||
  fail "the resume removed the temporary file of a process that still runs"
[[ ! -e A ]] || fail "resuming the moved folder recreated the old one: $(find A | head -3)"
[[ -f moved/lightning_logs/version_1/checkpoints/epoch=2-step=12.ckpt ]] || fail "the moved run wrote no checkpoint"
echo "a moved run folder resumes in its new place"

# A version named by two runs at once: the second is refused (exit 2), naming the first, and writes nothing there;
# once the first has ended, the version may be named again (Lightning's way to continue a run's logs), replacing its
# config.yaml only when asked.
"$fit" --max_epochs=1000 --num_train=20000 --enable_progress_bar=false --num_workers=0 --default_root_dir=held \
  --log_version=3 >held-a.log 2>&1 &
holder=$!
for _ in $(seq 1 200); do [[ -f held/lightning_logs/version_3/hparams.yaml ]] && break; sleep 0.05; done
held_before=$(cd held/lightning_logs/version_3 && sha256sum config.yaml hparams.yaml 2>/dev/null)
"$fit" "${quick[@]}" --default_root_dir=held --log_version=3 >held-b.log 2>&1
code=$?
[[ $code -eq 2 ]] || fail "a second run on a held version: exit $code, not 2 ($(grep -m1 error held-b.log))"
grep -q "version_3 is in use by another run (process $holder: " held-b.log ||
  fail "the refusal does not name process $holder: $(grep -m1 error held-b.log)"
[[ "$(cd held/lightning_logs/version_3 && sha256sum config.yaml hparams.yaml 2>/dev/null)" == "$held_before" ]] ||
  fail "the refused run wrote into the held folder"
kill "$holder"
wait "$holder"
# Its config.yaml is kept unless the new run asks to replace it (LightningCLI's overwrite): refused, then asked.
"$fit" "${quick[@]}" --default_root_dir=held --log_version=3 >held-c.log 2>&1
[[ $? -eq 2 ]] && grep -q "config.yaml exists already.*--save_config_overwrite=true" held-c.log ||
  fail "an ended run's config.yaml was not kept: $(grep -m1 error held-c.log)"
"$fit" "${quick[@]}" --default_root_dir=held --log_version=3 --save_config_overwrite=true >held-c.log 2>&1 ||
  fail "the version of a run that ended cannot be named again: $(grep -m1 error held-c.log)"
echo "a version another run holds is refused, naming it; free again once that run ended"

# --- 2. Inputs too large -----------------------------------------------------------------------------------
memory_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
truncate -s "$((memory_kib * 2))K" larger-than-memory.csv  # Sparse: costs no disk.
refused larger-than-memory "larger-than-memory.csv (" --data=larger-than-memory.csv
refused num-workers "--num_workers='2147483647' is not valid; pass an int in [0, 256]" --num_workers=2147483647
refused num-train "--data=synthetic with --num_train=9223372036854775807" --num_train=9223372036854775807
refused num-classes "needs more bytes than 64 bits count" --num_classes=4611686018427387904
refused num-val "--num_val=100000000000" --num_val=100000000000
refused hidden-sizes "cannot build the mlp model" --hidden_sizes=20000000,20000000
# A gzip file that inflates past what memory holds, under an address-space limit (ulimit -v) that makes that small:
# refused by the inflation bound, or by the allocation guard when the bound left too little for parsing; either way
# exit 2 and an error naming the file. The file itself is about 3 MiB.
python3 -c "
import zlib
c = zlib.compressobj(9, zlib.DEFLATED, 31)
row = b'1,2,3,4,5,6,7,8,0\n' * 65536
with open('bomb.csv.gz', 'wb') as out:
    for _ in range(1200):
        out.write(c.compress(row))
    out.write(c.flush())
"
(ulimit -v 3000000; refused gzip-bomb "bomb.csv.gz" --data=bomb.csv.gz) >gzip-bomb.out
cat gzip-bomb.out
grep -q '^FAIL' gzip-bomb.out && failures=$((failures + 1))
# Compressed input has a stated limit of its own (--max_inflated_mib, 1 GiB by default: this file inflates to 1.3 GiB),
# whatever the memory; the flag raises it.
refused gzip-limit "bomb.csv.gz inflates to more than 1.0 GiB, the most Kiln inflates" --data=bomb.csv.gz
refused gzip-limit-64 "bomb.csv.gz inflates to more than 64.0 MiB" --data=bomb.csv.gz --max_inflated_mib=64
refused max-inflated-0 "--max_inflated_mib='0' is not valid; pass a number of MiB in [1, 1048576]" --max_inflated_mib=0

# --- 3. Flag sources --------------------------------------------------------------------------------------
printf -- '--max_epochs=ten\n' >bad-value.flags
printf -- '--max_epoch=3\n' >unknown.flags
printf -- '# a comment\n\n  --max_epochs=1  \n--log_every_n_steps=2\n' >good.flags
refused flagfile-value "--max_epochs='ten' is not valid; pass an integer" --flagfile=bad-value.flags
refused flagfile-unknown "unknown flag --max_epoch; did you mean --max_epochs?" --flagfile=unknown.flags
refused flagfile-missing "--flagfile=missing.flags: No such file or directory" --flagfile=missing.flags
refused flagfile-dev-zero "--flagfile=/dev/zero is not a regular file" --flagfile=/dev/zero
FLAGS_max_epochs=abc refused fromenv-value "--max_epochs='abc' is not valid" --fromenv=max_epochs
refused fromenv-unset "FLAGS_seed is not set" --fromenv=seed
refused after-separator "unexpected argument '--max_epochs=1' after '--'" -- --max_epochs=1
refused undefok "--undefok is not accepted" --undefok=frobnicate
"$fit" "${quick[@]}" --default_root_dir=flags --flagfile=good.flags --summary_json=flags.json >flags.log 2>&1 ||
  fail "a good flag file was refused: $(grep error flags.log)"
grep -q '"epochs": 1,' flags.json || fail "the flag file's --max_epochs=1 was not applied"

# --- 4. Bad data -------------------------------------------------------------------------------------------
printf '\xef\xbb\xbf1,2,0\n3,4,1\n5,6,0\n7,8,1\n9,10,0\n' >bom.csv
"$fit" "${quick[@]}" --data=bom.csv --val_fraction=0.2 --default_root_dir=bom >bom.log 2>&1 || fail "bom.csv failed"
grep -q '^Data: bom.csv: 4 training and 1 validation rows' bom.log ||
  fail "a byte-order mark lost a row: $(grep '^Data' bom.log)"
printf '\xef\xbb\xbfx,y,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n' >bom-header.csv
"$fit" "${quick[@]}" --data=bom-header.csv --label_column=label --default_root_dir=bom >bom-header.log 2>&1 ||
  fail "a byte-order mark hid the header name 'label': $(grep error bom-header.log)"
printf 'x,y,label\r1,2,0\r3,4,1\r5,6,0\r7,8,1\r9,10,1\r' >mac.csv
"$fit" "${quick[@]}" --data=mac.csv --val_fraction=0.2 --default_root_dir=mac >mac.log 2>&1 || fail "mac.csv failed"
grep -q '^Data: mac.csv: 4 training and 1 validation rows' mac.log || fail "CR line ends: $(grep '^Data' mac.log)"
printf '1,2,0\n3,4,1\n5,6,nan\n7,8,1\n' >nan-label.csv
refused nan-label "nan-label.csv:3: label 'nan' (column 3, 'column_2') is not a finite number" --data=nan-label.csv
printf 'caf\xe9,b,label\n1,2,0\n3,4,1\n' >latin1.csv
refused latin1 "latin1.csv:1: byte 4 of the line (0xE9) is not UTF-8" --data=latin1.csv
printf 'a,b,label\n1,2,0\n3,4,1\n' | iconv -f UTF-8 -t UTF-16 >utf16.csv
refused utf16 "utf16.csv is UTF-16 text" --data=utf16.csv

# --- 5. Output locations -------------------------------------------------------------------------------------
echo x >a-file
refused root-is-file "'$work/a-file' is a file, not a folder" --default_root_dir="$work/a-file"
refused root-read-only "cannot create anything in '/proc'" --default_root_dir=/proc/kiln-runs
refused root-too-long "more than the file system's" --default_root_dir="$work/$(printf 'n%.0s' {1..300})"
mkdir -p a-folder
refused summary-is-folder "--summary_json=$work/a-folder: it is a folder" --summary_json="$work/a-folder"
refused predictions-is-folder "--predictions=$work/a-folder: it is a folder" \
  --mode=predict --ckpt_path="$work/B/lightning_logs/version_0/checkpoints/last.ckpt" --predictions="$work/a-folder"
# An output that is an input (through a link too) is refused, and the input is left as it was.
ckpt="$work/B/lightning_logs/version_0/checkpoints/last.ckpt"
ckpt_before=$(sha256sum <"$ckpt")
ln -s "$ckpt" "$work/ckpt-link"
refused predictions-over-checkpoint "--predictions=$ckpt: it is the file --ckpt_path names" \
  --mode=predict --ckpt_path="$ckpt" --predictions="$ckpt"
refused summary-over-checkpoint "it is the file --ckpt_path names" \
  --mode=validate --ckpt_path="$ckpt" --summary_json="$work/ckpt-link"
[[ "$(sha256sum <"$ckpt")" == "$ckpt_before" ]] || fail "an output was written over the checkpoint"
printf 'trainer:\n  max_epochs: 1\n' >run.yaml
ln run.yaml run-hard-link.yaml
refused summary-over-config "--summary_json=run-hard-link.yaml: it is the file --config names" \
  --config=run.yaml --summary_json=run-hard-link.yaml
[[ "$(cat run.yaml)" == "$(printf 'trainer:\n  max_epochs: 1')" ]] || fail "the summary was written over the config file"
# One error is one line, however the value that caused it is spelt (a newline in a path, an escape sequence).
refused newline-in-path "--data='bad\\nname.csv' is not valid" --data="$(printf 'bad\nname.csv')"
refused escape-in-path 'bad\x1b[2Jname.csv' --data="$(printf 'bad\033[2Jname.csv')"
printf 'trainer:\n  "max\\nepochs": 1\n' >newline-key.yaml
refused newline-in-yaml-key 'max\nepochs' --config=newline-key.yaml
# YAML aliases are references: 10 anchors of ten aliases each (about 600 bytes) stand for 10^10 nodes. Refused at once,
# naming the line and the limit (fit grew to 1.7 GB and ended in std::bad_alloc after 22 s, exit 1).
{
  printf 'trainer:\n  callbacks:\n  - class_path: ModelCheckpoint\n    init_args:\n      dirpath:\n'
  printf '      - &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n'
  for level in 1 2 3 4 5 6 7 8 9; do
    aliases=$(printf '*l%d, ' $((level - 1)){,,,,,,,,,})
    printf '      - &l%d [%s]\n' "$level" "${aliases%, }"
  done
} >laughs.yaml
refused yaml-aliases "--config=laughs.yaml: line 10: its aliases expand it past 100000 nodes, the most a config file \
may hold (kMaxYamlNodes)" --config=laughs.yaml
echo '{}' >target.json
ln -s target.json link.json
"$fit" "${quick[@]}" --default_root_dir=linked --summary_json=link.json >link.log 2>&1 || fail "link.json run failed"
[[ -L link.json ]] || fail "the symbolic link --summary_json was replaced by a file"
grep -q '"mode": "fit"' target.json || fail "the summary was not written through the link"

# --- 6. Hostile checkpoints ---------------------------------------------------------------------------------
# Files whose zip CRCs are right but whose pickle lies (tests/fuzz/hostile_checkpoints.py wrote them into the fuzz
# corpus, as 'r' + the file): each one crashed fit, or had it load memory it does not own, before the reader's checks.
declare -A says=(
  [hostile-storage-past-record]="but the record holds 4"
  [hostile-offset-2-40]="reaches past the 32 bytes of record data/0"
  [hostile-negative-offset]="negative storage offset"
  [hostile-stride-2-36]="reaches past the 32 bytes of record data/0"
  [hostile-negative-stride]="a tensor's stride 1 is -1"
  [hostile-offset-past-short-record]="reaches past the 4 bytes of record data/0"
  [hostile-duplicate-record]="appears twice"
  [hostile-nested-200000-lists]="containers nest more than 100 deep"
  [hostile-nested-200000-appends]="containers nest more than 100 deep"
  [hostile-memo-hidden-depth]="nests containers more than 64 deep"
  [hostile-list-holds-itself]="a container holds itself"
  [hostile-deflate-claims-3.75-gib]="(4026531840 bytes, says the zip directory) inflates to more than 1.0 GiB"
)
for name in "${!says[@]}"; do
  [[ -f "$corpus/$name" ]] || { fail "$name: not in the corpus"; continue; }
  tail -c +2 "$corpus/$name" >"$work/$name.ckpt"
  refused "$name" "${says[$name]}" --ckpt_path="$work/$name.ckpt"
done
# Raising the limit lets the record be inflated, which then shows its stream is not what its directory says.
refused deflate-limit-raised "record 'archive/data.pkl' does not inflate to its 4026531840 bytes" \
  --ckpt_path="$work/hostile-deflate-claims-3.75-gib.ckpt" --max_inflated_mib=4096

# --- 7. Checks before the first step ------------------------------------------------------------------------
# Every fact these need is known before training: each is refused with exit 2 and nothing written (it trained a step
# or an epoch, failed with exit 1 or 2 and left a run folder).
step=(--lr_scheduler_interval=step)
refused onecycle-nan "'onecycle' learning-rate schedule gives a rate of -nan at step 0" \
  --lr_scheduler=onecycle --pct_start=0.25 --total_steps=4 "${step[@]}" --max_epochs=1
refused onecycle-inf "gives a rate of inf at step 0" --lr_scheduler=onecycle --div_factor=1e-320 "${step[@]}"
refused onecycle-short "OneCycleLR was stepped 6 times but its total_steps is 4" \
  --lr_scheduler=onecycle --total_steps=4 "${step[@]}"
refused step-overflow "'step' learning-rate schedule gives a rate of 1e+297 at epoch 1" \
  --lr_scheduler=step --gamma=1e300 --step_size=1
refused cosine-warmup "the warm-up (50) is as long as the run (8)" --lr_scheduler=cosine --warmup_iters=50 "${step[@]}"
refused learning-rate "--learning_rate='1e+300' is not valid; pass a value > 0 within float32's range" \
  --learning_rate=1e300
refused plateau-monitor "--lr_scheduler_monitor='bogus' is not valid; the model logs train_loss_step" \
  --lr_scheduler=plateau --lr_scheduler_monitor=bogus
refused checkpoint-monitor "--checkpoint_monitor='val_los' is not valid; the model logs" --checkpoint_monitor=val_los
refused early-stopping-monitor "did you mean val_acc?" --early_stopping_monitor=val_ac
awk 'BEGIN { OFS = ","; print "x", "y"; for (i = 0; i < 40; i++) print i, 2 * i }' >regression.csv
refused regression-monitor "--checkpoint_monitor='val_acc' is not valid; the model logs train_loss_step, \
train_loss_epoch, val_loss, val_mae" --checkpoint_monitor=val_acc --data=regression.csv --task=regression

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "every hostile input held: nothing lost, nothing aborted, bad input refused before training"
