// Weight averaging: Lightning's StochasticWeightAveraging and EMAWeightAveraging callbacks
// (trainer/callbacks/stochastic_weight_averaging.h, weight_averaging.h), with their init arguments' names (EMA's
// prefixed with ema_) and Lightning's defaults. --swa_lrs adds the first (Lightning requires it), and
// --ema_weight_averaging the second; their other flags only tune them.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

ABSL_FLAG(std::string, swa_lrs, "",
          "StochasticWeightAveraging's swa_lrs: the learning rate SWA anneals to and holds, > 0 (e.g. 0.01); set, it "
          "adds the callback (empty: no SWA).");
ABSL_FLAG(std::string, swa_epoch_start, "0.8",
          "StochasticWeightAveraging's swa_epoch_start: the epoch SWA starts at, an int >= 1 counted from 1, or a "
          "fraction in [0.0, 1.0] written with a '.' (the epoch int(fraction * max_epochs)).");
ABSL_FLAG(int64_t, annealing_epochs, 10,
          "StochasticWeightAveraging's annealing_epochs: epochs over which the rate anneals to --swa_lrs, >= 0.");
ABSL_FLAG(std::string, annealing_strategy, "cos",
          "StochasticWeightAveraging's annealing_strategy: \"cos\" or \"linear\".");
ABSL_FLAG(bool, ema_weight_averaging, false,
          "Add EMAWeightAveraging: an exponential moving average of the weights, updated after optimizer steps, "
          "which validation runs on and which the model ends with.");
ABSL_FLAG(double, ema_decay, 0.999,
          "EMAWeightAveraging's decay: average = decay * average + (1 - decay) * weights, in [0, 1].");
ABSL_FLAG(int64_t, ema_update_every_n_steps, 1,
          "EMAWeightAveraging's update_every_n_steps: update after every N-th optimizer step, >= 1.");
ABSL_FLAG(std::string, ema_update_starting_at_step, "",
          "EMAWeightAveraging's update_starting_at_step: the first optimizer step (zero-based) to update after, an int "
          ">= 0; empty: from the first.");
ABSL_FLAG(std::string, ema_update_starting_at_epoch, "",
          "EMAWeightAveraging's update_starting_at_epoch: also update at the end of every epoch from this one "
          "(zero-based), an int >= 0; empty: never at an epoch's end.");
ABSL_FLAG(bool, ema_use_buffers, true,
          "EMAWeightAveraging's use_buffers: average the buffers (batch norm's statistics) too; false: copy them.");
