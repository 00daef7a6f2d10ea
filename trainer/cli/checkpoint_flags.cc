// Checkpoints and resuming.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

// The Trainer's options of this group, from trainer/trainer_options.inc.
#define KILN_FLAG_GROUP_checkpoint(...) __VA_ARGS__
#include "trainer/cli/trainer_option_flags.h"

ABSL_FLAG(std::string, ckpt_path, "",
          "A checkpoint to resume from (fit) or to load (validate, predict): a .ckpt path, or \"last\" for the "
          "newest complete checkpoint anywhere under --default_root_dir.");
ABSL_FLAG(int64_t, every_n_train_steps, 0, "Also save a checkpoint every N optimizer steps (0: only at epoch ends).");
ABSL_FLAG(bool, save_last, true, "Keep checkpoints/last.ckpt up to date with every save.");
ABSL_FLAG(std::string, checkpoint_monitor, "",
          "ModelCheckpoint's monitor: keep the checkpoints with the best value of this logged metric (e.g. "
          "val_loss); empty: the newest.");
ABSL_FLAG(std::string, checkpoint_mode, "min", "ModelCheckpoint's mode: \"min\" or \"max\" is best.");
ABSL_FLAG(int64_t, save_top_k, 1, "ModelCheckpoint's save_top_k: how many best checkpoints to keep (-1: all, 0: none).");
ABSL_FLAG(std::string, checkpoint_filename, "",
          "ModelCheckpoint's filename, with {epoch}, {step} and metric names in braces (e.g. "
          "\"{epoch}-{val_loss:.2f}\"); empty: \"{epoch}-{step}\", as epoch=E-step=S.ckpt.");
ABSL_FLAG(int64_t, every_n_epochs, 1, "ModelCheckpoint's every_n_epochs: save at the end of every N-th epoch.");
ABSL_FLAG(bool, save_weights_only, false,
          "ModelCheckpoint's save_weights_only: write Lightning's weights-only checkpoints (the model's weights and "
          "the loops' progress; no optimizer, scheduler or callback state): they load for validate, test and predict, "
          "and fit refuses to resume from them.");
ABSL_FLAG(std::string, train_time_interval, "",
          "ModelCheckpoint's train_time_interval: also save after the optimizer step at which this much time has "
          "passed since the last such save: H:MM:SS as LightningCLI writes a timedelta (\"0:30:00\", \"1 day, "
          "0:00:00\"), or a duration such as 90s, 30m (empty: off). Exclusive with --every_n_train_steps and "
          "--every_n_epochs (set it to 0).");
ABSL_FLAG(std::string, save_on_train_epoch_end, "",
          "ModelCheckpoint's save_on_train_epoch_end: true saves at the end of the training epoch, false after each "
          "validation; empty: Lightning's choice (the epoch's end when validation runs once an epoch at its end, or "
          "not at all).");
ABSL_FLAG(bool, enable_version_counter, true,
          "ModelCheckpoint's enable_version_counter: a checkpoint name already taken gets -v1, -v2, ...; false "
          "replaces the file.");
ABSL_FLAG(std::string, on_exception_dirpath, "",
          "OnExceptionCheckpoint's dirpath: when fit fails with an error (not a non-finite loss), save a checkpoint "
          "of where it stood to <dir>/<--on_exception_filename>.ckpt before exiting; empty: none.");
ABSL_FLAG(std::string, on_exception_filename, "on_exception",
          "OnExceptionCheckpoint's filename, without the extension.");
ABSL_FLAG(std::string, early_stopping_monitor, "",
          "EarlyStopping's monitor: stop when this logged metric (e.g. val_loss) stops improving; empty: no early "
          "stopping.");
ABSL_FLAG(std::string, early_stopping_mode, "min", "EarlyStopping's mode: \"min\" or \"max\" is better.");
ABSL_FLAG(int64_t, patience, 3, "EarlyStopping's patience: checks with no improvement before stopping.");
ABSL_FLAG(double, min_delta, 0.0, "EarlyStopping's min_delta: the smallest change that counts as an improvement.");
