"""LightningCLI's side of tests/lightning/cli_test.sh: the real LightningCLI (Lightning 2.x from PyPI) with a model and
data module whose init arguments are fit's model and data keys (KilnModel, KilnData), so that a config file means
the same run to both.

  lightning_cli.py accept KILN_YAML MAX_EPOCHS [swa]
      LightningCLI parses and instantiates Kiln's config.yaml (fit --print_config), less the keys only Kiln has
      (KILN_ONLY: each one left out is printed, and any other key Lightning lacks fails the test), and checks the
      trainer, optimizer, scheduler, callbacks, loggers, model and data it made against the settings cli_test.sh gave
      (MAX_EPOCHS epochs; with swa, StochasticWeightAveraging's too). EMAWeightAveraging must be there in both.
  lightning_cli.py print ARGS...
      LightningCLI's own --print_config for `fit ARGS...`: the config a Lightning user has.
"""
import sys
from typing import Optional, Union

import lightning as L
import torch
import yaml
from lightning.pytorch.cli import LightningCLI

# fit's keys that Lightning has no counterpart for: fit's own trainer settings and its run outputs. (fsdp's eight
# are Lightning's FSDPStrategy arguments, which a LightningCLI config gives under trainer.strategy.init_args; the
# next three are the fields of its mixed_precision, a MixedPrecision object; the last three ModelParallelStrategy's
# init_args.)
KILN_ONLY = {
    "trainer": {"process_group_timeout", "process_group_backend", "on_nonfinite_loss", "sharding_strategy",
                "auto_wrap_policy", "auto_wrap_min_num_params", "activation_checkpointing_policy", "state_dict_type",
                "param_dtype", "reduce_dtype", "buffer_dtype", "data_parallel_size", "tensor_parallel_size",
                "save_distributed_checkpoint"},
    # fit's tuning keys: Lightning 1.x's Trainer arguments, which Lightning 2 moved to its Tuner (not a CLI key).
    "": {"mode", "predict_data", "predictions", "report", "summary_json", "verbose", "auto_lr_find",
         "auto_scale_batch_size", "lr_find_min_lr", "lr_find_max_lr", "lr_find_num_training", "lr_find_mode"},
}


class KilnModel(L.LightningModule):
    """fit's model keys (config_file.cc, ConfigKeys), with fit's defaults."""

    def __init__(self, model: str = "mlp", hidden_sizes: list[int] = [64, 64], channels: list[int] = [16, 32],
                 kernel_size: int = 3, input_shape: Optional[list[int]] = None, fused_optimizer: bool = True):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(2, 1)  # The optimizer needs parameters.


class KilnData(L.LightningDataModule):
    """fit's data keys, with fit's defaults."""

    def __init__(self, data: str = "synthetic", task: str = "classification", label_column: Union[int, str] = -1,
                 val_fraction: float = 0.2, batch_size: int = 64, shuffle: bool = True, normalize: bool = True,
                 streaming: bool = False, val_data: str = "", num_workers: int = 2, max_inflated_mib: int = 1024,
                 digits_path: str = "",
                 num_features: int = 16, num_classes: int = 4, num_train: int = 4096, num_val: int = 1024):
        super().__init__()
        self.batch_size = batch_size
        self.num_train = num_train


def check(label, got, want):
    if got != want:
        sys.exit(f"FAIL: LightningCLI read Kiln's config to {label} = {got!r}, not {want!r}")


def accept(path, max_epochs, swa):
    config = yaml.safe_load(open(path))
    for section, keys in KILN_ONLY.items():
        where = config if section == "" else config[section]
        for key in sorted(keys & set(where)):
            print(f"left out Kiln's own {section + '.' if section else ''}{key}: {where.pop(key)!r}")
    stripped = path + ".lightning.yaml"
    yaml.safe_dump(config, open(stripped, "w"))
    # The fit subcommand, as `python cli.py fit --config=...` runs it, stopped where training would start.
    sys.argv = sys.argv[:1]
    CheckingCli.max_epochs = max_epochs
    CheckingCli.swa = swa
    CheckingCli(KilnModel, KilnData, args=["fit", "--config", stripped], save_config_callback=None)


class CheckingCli(LightningCLI):
    max_epochs = None
    swa = False

    def before_fit(self):
        trainer, model = self.trainer, self.model
        check("trainer.max_epochs", trainer.max_epochs, self.max_epochs)
        optimizers, schedulers = model.configure_optimizers()
        optimizer, scheduler = optimizers[0], schedulers[0]
        check("the optimizer", type(optimizer).__name__, "SGD")
        group = optimizer.param_groups[0]
        check("its lr, momentum", (group["lr"], group["momentum"]), (0.05, 0.5))
        check("the scheduler", type(scheduler).__name__, "StepLR")
        check("its step_size, gamma", (scheduler.step_size, scheduler.gamma), (2, 0.5))
        callbacks = {type(c).__name__: c for c in trainer.callbacks}
        check("ModelCheckpoint's monitor, save_top_k",
              (callbacks["ModelCheckpoint"].monitor, callbacks["ModelCheckpoint"].save_top_k), ("val_loss", 2))
        check("EarlyStopping's monitor, patience",
              (callbacks["EarlyStopping"].monitor, callbacks["EarlyStopping"].patience), ("val_loss", 4))
        ema = callbacks.get("EMAWeightAveraging")
        check("EMAWeightAveraging's update_every_n_steps", ema and ema.update_every_n_steps, 2)
        # The decay is in the averaging function Lightning builds from it (get_ema_avg_fn): averaging 0 with 1 gives
        # 1 - decay.
        one = torch.tensor(1.0, dtype=torch.float64)
        decay = ema and 1 - ema._kwargs["avg_fn"](0 * one, one, one).item()
        check("EMAWeightAveraging's decay", ema and round(decay, 12), 0.9)
        if self.swa:
            swa = callbacks.get("StochasticWeightAveraging")
            check("StochasticWeightAveraging's swa_lrs, swa_epoch_start, annealing_strategy",
                  swa and (swa._swa_lrs, swa._swa_epoch_start, swa._annealing_strategy), (0.05, 2, "linear"))
        check("the loggers", [type(logger).__name__ for logger in trainer.loggers], ["CSVLogger", "TensorBoardLogger"])
        check("model.hidden_sizes", list(model.hparams.hidden_sizes), [32, 16])
        check("data.batch_size", self.datamodule.batch_size, 32)
        print(f"LightningCLI made Kiln's run: SGD(lr=0.05, momentum=0.5), StepLR(2, 0.5), ModelCheckpoint and "
              f"EarlyStopping on val_loss, EMAWeightAveraging{', StochasticWeightAveraging' if self.swa else ''}, "
              f"CSV and TensorBoard loggers, {self.max_epochs} epochs")
        raise SystemExit(0)


def print_config(args):
    sys.argv = ["lightning_cli.py", "fit", "--print_config"] + args
    LightningCLI(KilnModel, KilnData, save_config_callback=None)


if __name__ == "__main__":
    if sys.argv[1] == "accept":
        accept(sys.argv[2], int(sys.argv[3]), sys.argv[4:] == ["swa"])
    elif sys.argv[1] == "print":
        print_config(sys.argv[2:])
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")
