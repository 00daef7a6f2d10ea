// The training loop: Lightning's loop arguments.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

ABSL_FLAG(int64_t, max_epochs, 10, "Stop after this many epochs (-1: no epoch limit).");
ABSL_FLAG(int64_t, min_epochs, 0, "Train at least this many epochs, even when asked to stop earlier.");
ABSL_FLAG(int64_t, max_steps, -1, "Stop after this many optimizer steps (-1: no step limit).");
ABSL_FLAG(std::string, max_time, "",
          "Stop after this much training time: DD:HH:MM:SS as in Lightning, or a duration such as 90s, 5m, 1h30m "
          "(empty: no limit).");
ABSL_FLAG(std::string, limit_train_batches, "1.0",
          "Training batches per epoch: an int count, or a fraction in [0.0, 1.0] written with a '.'.");
ABSL_FLAG(std::string, limit_val_batches, "1.0",
          "Validation batches per epoch: an int count, or a fraction in [0.0, 1.0] written with a '.'.");
ABSL_FLAG(std::string, limit_test_batches, "1.0",
          "Batches to test on (--mode=test): an int count, or a fraction in [0.0, 1.0].");
ABSL_FLAG(std::string, limit_predict_batches, "1.0",
          "Batches to predict on (--mode=predict): an int count, or a fraction in [0.0, 1.0].");
ABSL_FLAG(std::string, val_check_interval, "1.0",
          "Validate every this fraction of an epoch (e.g. 0.25), or every N training batches (an int).");
ABSL_FLAG(int64_t, check_val_every_n_epoch, 1, "Validate every N epochs.");
ABSL_FLAG(int64_t, num_sanity_val_steps, 2, "Validation batches to run before training (-1: all).");
ABSL_FLAG(int64_t, accumulate_grad_batches, 1, "Accumulate gradients over N batches per optimizer step.");
ABSL_FLAG(double, gradient_clip_val, 0.0, "Clip gradients at this value (0: no clipping).");
ABSL_FLAG(std::string, gradient_clip_algorithm, "norm", "\"norm\" (clip the total norm) or \"value\" (clip each).");
ABSL_FLAG(std::string, fast_dev_run, "false",
          "Run N batches of training and validation in one epoch, without checkpoints or logs, to check that "
          "everything runs: true (1 batch), false (off, the default) or an int N.");
ABSL_FLAG(std::string, overfit_batches, "0.0",
          "Train and validate on the same first batches every epoch, unshuffled: an int count or a fraction (0: off).");
ABSL_FLAG(bool, deterministic, false, "Use LibTorch's deterministic algorithms.");
ABSL_FLAG(int64_t, seed, 42, "Seeds LibTorch's generators, the model's initial parameters, the data and shuffling.");
ABSL_FLAG(std::string, on_nonfinite_loss, "stop",
          "A NaN or infinite training loss: \"stop\" fails the run naming the batch, \"skip\" drops that batch's "
          "accumulation window and goes on. Kiln never trains on it.");
