// Tuning before training: Lightning's Tuner (lr_find, scale_batch_size), which fit runs before it trains when asked,
// as Lightning 1.x's Trainer(auto_lr_find=..., auto_scale_batch_size=...) did in trainer.tune(). Lightning 2 moved
// both to lightning.pytorch.tuner.Tuner and its Trainer has no such arguments, so these are fit's own flags (and
// top-level config keys), not Trainer options: Lightning 1.x's names, which its users know.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

ABSL_FLAG(bool, auto_lr_find, false,
          "Before training, run Lightning's learning-rate range test (Tuner.lr_find) and train with its suggestion "
          "in place of --learning_rate; the curve is written to <run folder>/lr_find.csv.");
ABSL_FLAG(std::string, auto_scale_batch_size, "none",
          "Before training (and before --auto_lr_find), find the largest batch size that fits the device's memory "
          "(Tuner.scale_batch_size) and train with it in place of --batch_size: \"power\" (double until out of "
          "memory), \"binsearch\" (then search between), or \"none\". One device only.");
ABSL_FLAG(double, lr_find_min_lr, 1e-8, "--auto_lr_find: the first step's learning rate (Lightning's min_lr).");
ABSL_FLAG(double, lr_find_max_lr, 1.0, "--auto_lr_find: the last step's learning rate (Lightning's max_lr).");
ABSL_FLAG(int64_t, lr_find_num_training, 100,
          "--auto_lr_find: optimizer steps, one learning rate each (Lightning's num_training).");
ABSL_FLAG(std::string, lr_find_mode, "exponential",
          "--auto_lr_find: how the rate rises: \"exponential\" or \"linear\" (Lightning's mode).");
