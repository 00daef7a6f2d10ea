#!/usr/bin/env bash
# LightningCLI configs both ways, with the real LightningCLI (Lightning 2.x from PyPI, tools/setup.sh) and the real
# //trainer:fit:
#   1. LightningCLI takes Kiln's config.yaml (fit --print_config), less the keys only Kiln has, and makes the same
#      run: trainer, optimizer and scheduler classes with their arguments, callbacks (the weight-averaging ones
#      too), loggers, model, data;
#   2. a config LightningCLI's --print_config wrote (every Trainer argument, the classes with all their init_args,
#      seed_everything, weights_only) runs in fit as written, and fit's config of it goes back to LightningCLI as
#      the same run;
#   3. LightningCLI's config with an FSDPStrategy object is fit's fsdp with those settings.
set -uo pipefail
cli=$PWD/tests/lightning/lightning_cli.py
lightning_modules="lightning, jsonargparse"
source "$PWD/tests/lightning/common.sh"

# 1. Kiln -> LightningCLI.
"$fit" --print_config --max_epochs=3 --optimizer=sgd --learning_rate=0.05 --momentum=0.5 --lr_scheduler=step \
  --step_size=2 --gamma=0.5 --checkpoint_monitor=val_loss --save_top_k=2 --early_stopping_monitor=val_loss \
  --patience=4 --hidden_sizes=32,16 --batch_size=32 --num_train=256 --num_val=64 --seed=5 --default_root_dir=run \
  --swa_lrs=0.05 --swa_epoch_start=2 --annealing_strategy=linear --ema_weight_averaging --ema_decay=0.9 \
  --ema_update_every_n_steps=2 >kiln.yaml 2>print.err || { cat print.err; fail "fit --print_config failed"; }
lightning "$cli" accept kiln.yaml 3 swa || fail "LightningCLI did not make Kiln's run from Kiln's config.yaml"

# 2. LightningCLI -> Kiln -> LightningCLI.
lightning "$cli" print --seed_everything=5 --trainer.max_epochs=2 --optimizer=SGD --optimizer.lr=0.05 \
  --optimizer.momentum=0.5 --lr_scheduler=StepLR --lr_scheduler.step_size=2 --lr_scheduler.gamma=0.5 \
  --trainer.callbacks+=ModelCheckpoint --trainer.callbacks.monitor=val_loss --trainer.callbacks.save_top_k=2 \
  --trainer.callbacks+=EarlyStopping --trainer.callbacks.monitor=val_loss --trainer.callbacks.patience=4 \
  --trainer.callbacks+=EMAWeightAveraging --trainer.callbacks.decay=0.9 --trainer.callbacks.update_every_n_steps=2 \
  --trainer.logger+=CSVLogger --trainer.logger.save_dir=lightning_run --trainer.logger+=TensorBoardLogger \
  --trainer.logger.save_dir=lightning_run '--model.hidden_sizes=[32,16]' --data.batch_size=32 --data.num_train=256 \
  --data.num_val=64 >lightning.yaml || fail "LightningCLI --print_config failed"
grep -q '^  inference_mode: true$' lightning.yaml || fail "LightningCLI's config does not list every Trainer argument"
"$fit" --config=lightning.yaml --print_config >from_lightning.yaml 2>read.err ||
  { cat read.err; fail "fit did not read LightningCLI's config as written"; }
lightning "$cli" accept from_lightning.yaml 2 ||
  fail "fit's config of LightningCLI's is not the same run to LightningCLI"
"$fit" --config=lightning.yaml --enable_progress_bar=false >run.out 2>run.err ||
  { tail -5 run.err; fail "fit --config=<LightningCLI's config> did not run"; }
grep -q "Trained on cpu (single_device, 32-true) for 2 epochs, 16 steps" run.out ||
  fail "the run of LightningCLI's config is not 2 epochs of 256 rows in batches of 32: $(head -1 run.out)"
logs=lightning_run/lightning_logs
[[ -f $logs/version_0/metrics.csv && -n "$(ls $logs/version_1/events.*)" ]] ||
  fail "the loggers' save_dir was not where the run wrote: $(find lightning_run | head)"

# 3. A strategy object as LightningCLI writes it (FSDPStrategy with every init argument) is that strategy in fit.
lightning "$cli" print --trainer.strategy=FSDPStrategy --trainer.strategy.sharding_strategy=SHARD_GRAD_OP \
  --trainer.strategy.state_dict_type=sharded >strategy.yaml || fail "LightningCLI --print_config of FSDPStrategy failed"
grep -q "class_path: lightning.pytorch.strategies.FSDPStrategy" strategy.yaml ||
  fail "LightningCLI's config has no FSDPStrategy object: $(grep -A2 ' strategy:' strategy.yaml)"
"$fit" --config=strategy.yaml --print_config >from_strategy.yaml 2>strategy.err ||
  { cat strategy.err; fail "fit did not read LightningCLI's FSDPStrategy object"; }
for line in "strategy: fsdp" "sharding_strategy: SHARD_GRAD_OP" "state_dict_type: sharded"; do
  grep -q "^  $line\$" from_strategy.yaml || fail "fit's config of LightningCLI's FSDPStrategy lacks '$line'"
done

finish "LightningCLI $("$python" -c 'import lightning; print(lightning.__version__)') runs Kiln's config, and fit" \
  "runs LightningCLI's as written"
