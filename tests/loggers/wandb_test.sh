#!/usr/bin/env bash
# Kiln's WandbLogger read back by W&B's own reader (read_wandb.py: wandb 0.29's datastore and its Record messages),
# run by run against Kiln's CSV logger of the same run, and listed by `wandb sync --view --verbose` (which reads and
# prints every record, offline: a dummy key, and a server URL on 127.0.0.1 that nothing answers). A user's program
# (logger_program.cc), on one process and on two, with a hyper-parameter of 100,000 characters (a record over three
# of the log's blocks), fitting and then testing into one run, log_model=True; fit with --logger=csv,wandb and
# log_model=all, fit with a config file's WandbLogger, fit with wandb alone under WANDB_MODE=offline (checkpoints in
# Lightning's <save_dir>/<project>/<id>/checkpoints). Then what a user gets wrong: offline=False, bad values.
set -uo pipefail
tracking_modules="wandb.sdk.internal.datastore"
source tests/loggers/common.sh
export HOME=$work TMPDIR=$work WANDB_SILENT=true
unset WANDB_MODE WANDB_PROJECT WANDB_DIR

value() { sed -n "s/^$1=//p" "$2"; }
# `wandb sync --view --verbose RUN_DIR` lists the run's records: its run id and an exit record are there.
view() {
  WANDB_API_KEY=$(printf 'k%.0s' {1..40}) WANDB_BASE_URL=http://127.0.0.1:9 "$python" -m wandb sync \
    --view --verbose "$1" >"$2" 2>&1 || return 1
  grep -q "run_id: \"$3\"" "$2" && grep -q '^exit {' "$2"
}
# The one offline run folder under $1/wandb.
run_dir() {
  local dirs=("$1"/wandb/offline-run-*)
  ((${#dirs[@]} == 1)) && [[ -d ${dirs[0]} ]] && echo "${dirs[0]}"
}

# 1. A user's program: fit, then test, into one run; checkpoints kept at the end (log_model=True).
if "$program" --root=program --wandb --log_model=true --run_name=kiln-program --big_hparam=100000 --test \
  >program.out 2>program.err; then
  csv=$(value csv program.out)
  id=$(value wandb_id program.out)
  "$python" "$here/read_wandb.py" "$(value wandb_dir program.out)" "$csv" --hparams_yaml "$(dirname "$csv")/hparams.yaml" \
    --id "$id" --project kiln_test --name kiln-program --tag kiln --tag test --ckpt_dir "$(dirname "$csv")/checkpoints" \
    --expect_checkpoints epoch=0-step=16.ckpt,epoch=1-step=32.ckpt,last.ckpt >program.check 2>&1 ||
    fail "the program's run: $(tail -5 program.check)"
  cat program.check
  grep -q test_loss "$csv" || fail "the program's test stage logged nothing"
  view "$(value wandb_dir program.out)" program.view "$id" || fail "wandb sync --view: $(tail -5 program.view)"
  [[ $(readlink program/wandb/latest-run) == $(basename "$(value wandb_dir program.out)") ]] ||
    fail "program/wandb/latest-run does not point to the run"
else
  fail "the program failed: $(tail -5 program.err)"
fi

# 2. The same program on two processes: global rank zero alone writes the run.
if "$program" --root=two --wandb --devices=2 >two.out 2>two.err; then
  csv=$(value csv two.out)
  if dir=$(run_dir two); then
    "$python" "$here/read_wandb.py" "$dir" "$csv" --hparams_yaml "$(dirname "$csv")/hparams.yaml" \
      --id "$(value wandb_id two.out)" --project kiln_test --tag kiln --tag test >two.check 2>&1 ||
      fail "the 2-process run: $(tail -5 two.check)"
    cat two.check
  else
    fail "two processes wrote $(ls -d two/wandb/offline-run-* 2>/dev/null | wc -l) offline runs, not 1"
  fi
else
  fail "the program on 2 processes failed: $(tail -5 two.err)"
fi

# 3. fit with the CSV logger beside it, every checkpoint kept as it is saved (log_model=all: also the one the next
# save replaces; 8 steps an epoch: 512 examples in batches of 64), metric names prefixed.
if "$fit" --max_epochs=2 --num_train=512 --num_val=128 --log_every_n_steps=5 --enable_progress_bar=false \
  --default_root_dir=fit --logger=csv,wandb --wandb_offline=true --wandb_save_dir=fit --wandb_project=kiln_fit \
  --wandb_name=from-fit --wandb_log_model=all --wandb_prefix=kiln --report=false >fit.out 2>fit.err; then
  if dir=$(run_dir fit); then
    "$python" "$here/read_wandb.py" "$dir" fit/lightning_logs/version_0/metrics.csv \
      --hparams_yaml fit/lightning_logs/version_0/hparams.yaml --id "${dir##*-}" --project kiln_fit --name from-fit \
      --prefix kiln --ckpt_dir fit/lightning_logs/version_0/checkpoints \
      --expect_checkpoints epoch=0-step=8.ckpt,epoch=1-step=16.ckpt,last.ckpt >fit.check 2>&1 ||
      fail "fit: $(tail -5 fit.check)"
    cat fit.check
  else
    fail "fit wrote no single offline run under fit/wandb"
  fi
else
  fail "fit with --logger=csv,wandb failed: $(tail -5 fit.err)"
fi

# 4. A config file's WandbLogger, as LightningCLI writes one.
cat >config.yaml <<'YAML'
trainer:
  max_epochs: 1
  default_root_dir: cfg
  enable_progress_bar: false
  logger:
  - class_path: lightning.pytorch.loggers.CSVLogger
  - class_path: lightning.pytorch.loggers.WandbLogger
    init_args: {offline: true, save_dir: cfg, id: cfgrun1, project: from_config, name: configured, prefix: ''}
YAML
if "$fit" --config=config.yaml --num_train=256 --num_val=64 --report=false >cfg.out 2>cfg.err; then
  if dir=$(run_dir cfg); then
    "$python" "$here/read_wandb.py" "$dir" cfg/lightning_logs/version_0/metrics.csv \
      --hparams_yaml cfg/lightning_logs/version_0/hparams.yaml --id cfgrun1 --project from_config \
      --name configured >cfg.check 2>&1 || fail "fit --config: $(tail -5 cfg.check)"
    cat cfg.check
  else
    fail "fit --config wrote no single offline run under cfg/wandb"
  fi
  "$fit" --config=config.yaml --print_config >printed.yaml 2>printed.err || fail "--print_config failed"
  grep -A14 'WandbLogger' printed.yaml | grep -q 'project: from_config' ||
    fail "--print_config lacks the WandbLogger's project: $(grep -A14 WandbLogger printed.yaml)"
else
  fail "fit --config=config.yaml (WandbLogger) failed: $(tail -5 cfg.err)"
fi

# 5. wandb alone, offline through WANDB_MODE (offline=False, Lightning's default, otherwise): the checkpoints go
# where Lightning puts them for a first logger with no folder of its own, <save_dir>/<project>/<id>/checkpoints.
if WANDB_MODE=offline "$fit" --max_epochs=1 --num_train=128 --num_val=32 --logger=wandb --wandb_save_dir=solo \
  --wandb_id=solo1 --wandb_project=alone --default_root_dir=solo --report=false >solo.out 2>solo.err; then
  ls solo/alone/solo1/checkpoints/*.ckpt >/dev/null 2>&1 ||
    fail "no checkpoint in solo/alone/solo1/checkpoints: $(find solo -name '*.ckpt')"
  if dir=$(run_dir solo); then
    view "$dir" solo.view solo1 || fail "wandb sync --view of the solo run: $(tail -5 solo.view)"
  else
    fail "fit --logger=wandb wrote no single offline run under solo/wandb"
  fi
else
  fail "WANDB_MODE=offline fit --logger=wandb failed: $(tail -5 solo.err)"
fi

# 6. What a user gets wrong: exit 2, naming the value and the fix, and nothing written.
refused() {  # refused NAME WANT_IN_STDERR FLAGS...
  local name=$1 want=$2
  shift 2
  "$fit" --max_epochs=1 --num_train=64 --num_val=32 --default_root_dir="$name" --report=false "$@" \
    >"$name.out" 2>"$name.err"
  local status=$?
  [[ $status == 2 ]] || fail "$name ($*): exit $status, not 2: $(tail -2 "$name.err")"
  grep -qF -- "$want" "$name.err" || fail "$name: the error does not say '$want': $(tail -2 "$name.err")"
  [[ ! -e $name/wandb && ! -e wandb ]] || fail "$name: a run folder was written"
}
refused online "wandb sync" --logger=wandb
grep -qF -- "--wandb_offline='false'" online.err || fail "the online error does not name --wandb_offline"
refused log_model "sometimes" --logger=wandb --wandb_offline=true --wandb_log_model=sometimes
grep -qF "false, true or all" log_model.err || fail "the log_model error does not list the values"
refused project "a/b" --logger=wandb --wandb_offline=true --wandb_project=a/b
refused id "x:y" --logger=wandb --wandb_offline=true --wandb_id=x:y
refused name "my model" --logger=wandb --wandb_offline=true --wandb_checkpoint_name="my model"
refused logger "wandb," --logger=wandb,mlfow
grep -qF "wandb" logger.err || fail "the --logger error does not list wandb"

finish "W&B's own reader read back what Kiln logged: a program on 1 and 2 processes, fit, a config file"
