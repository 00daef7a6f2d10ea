// The learning-rate scheduler: which schedule, when it steps, and each schedule's settings in PyTorch's names
// (trainer/optim). The schedulers' own defaults are PyTorch's; the run's length fills T_max and total_steps.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

ABSL_FLAG(std::string, lr_scheduler, "none",
          "The learning-rate schedule: \"none\", \"step\" (StepLR), \"cosine\" (CosineAnnealingLR), \"plateau\" "
          "(ReduceLROnPlateau) or \"onecycle\" (OneCycleLR).");
ABSL_FLAG(std::string, lr_scheduler_interval, "epoch",
          "When the schedule steps (Lightning's interval): \"epoch\" (after each epoch) or \"step\" (after each "
          "optimizer step; plateau: after the step's validation, so validate at least that often).");
ABSL_FLAG(int64_t, lr_scheduler_frequency, 1, "Step the schedule every N epochs or optimizer steps (frequency).");
ABSL_FLAG(std::string, lr_scheduler_monitor, "val_loss",
          "plateau: the logged metric it watches (Lightning's monitor); a run that has not logged it when the "
          "schedule steps stops with an error.");
ABSL_FLAG(int64_t, warmup_iters, 0,
          "Linear warm-up over this many epochs or steps (--lr_scheduler_interval) before the schedule, or alone "
          "with --lr_scheduler=none (LinearLR, then SequentialLR); 0: none. Not with onecycle, which warms up "
          "itself (--pct_start).");
ABSL_FLAG(double, warmup_start_factor, 1.0 / 3,
          "The warm-up's first rate, as a fraction of --learning_rate (LinearLR's start_factor), in (0, 1].");
ABSL_FLAG(int64_t, step_size, 10, "step: multiply the rate by --gamma every this many epochs or steps.");
ABSL_FLAG(double, gamma, 0.1, "step: the factor, > 0.");
ABSL_FLAG(int64_t, T_max, 0,  // NOLINT
          "cosine: epochs or steps from --learning_rate down to --eta_min; 0: the run's length (--max_epochs, or "
          "its optimizer steps), less the warm-up.");
ABSL_FLAG(double, eta_min, 0.0, "cosine: the lowest rate, >= 0.");
ABSL_FLAG(double, max_lr, 0.0, "onecycle: the peak rate; 0: --learning_rate.");
ABSL_FLAG(int64_t, total_steps, 0,
          "onecycle: epochs or steps in the cycle; 0: the run's length (--max_epochs, or its optimizer steps).");
ABSL_FLAG(double, pct_start, 0.3, "onecycle: the share of the cycle spent raising the rate, in [0, 1].");
ABSL_FLAG(std::string, anneal_strategy, "cos", "onecycle: \"cos\" or \"linear\" annealing.");
ABSL_FLAG(double, div_factor, 25.0, "onecycle: the first rate is --max_lr / div_factor.");
ABSL_FLAG(double, final_div_factor, 1e4, "onecycle: the last rate is the first / final_div_factor.");
ABSL_FLAG(bool, three_phase, false, "onecycle: come back down to the first rate before annealing to the last.");
ABSL_FLAG(std::string, plateau_mode, "min", "plateau: \"min\" (lower is better) or \"max\".");
ABSL_FLAG(double, plateau_factor, 0.1, "plateau: multiply the rate by this, in (0, 1), on a plateau.");
ABSL_FLAG(int64_t, plateau_patience, 10, "plateau: steps with no improvement before the rate drops.");
ABSL_FLAG(double, plateau_threshold, 1e-4, "plateau: the least change that counts as an improvement, >= 0.");
ABSL_FLAG(std::string, plateau_threshold_mode, "rel",
          "plateau: --plateau_threshold is relative to the best value (\"rel\") or absolute (\"abs\").");
ABSL_FLAG(int64_t, plateau_cooldown, 0, "plateau: steps after a drop before bad steps count again.");
ABSL_FLAG(double, min_lr, 0.0, "plateau: the rate never drops below this, >= 0.");
