// LRSchedulerOptions: a learning-rate schedule chosen by name, with its settings in PyTorch's names, and what turns
// it into the SchedulerConfigs configure_optimizers returns (as LightningCLI's lr_scheduler section does). Programs
// that take the schedule from their users (//trainer:fit's --lr_scheduler flags) describe it with this.
#ifndef KILN_TRAINER_OPTIM_LR_SCHEDULER_OPTIONS_H_
#define KILN_TRAINER_OPTIM_LR_SCHEDULER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "torch/optim/optimizer.h"
#include "trainer/core/lightning_module.h"
#include "trainer/optim/one_cycle_lr.h"
#include "trainer/optim/reduce_lr_on_plateau.h"

namespace kiln {

struct LRSchedulerOptions {
  // "none", "step" (StepLR), "cosine" (CosineAnnealingLR), "plateau" (ReduceLROnPlateau), "onecycle" (OneCycleLR).
  std::string name = "none";
  SchedulerConfig::Interval interval = SchedulerConfig::Interval::kEpoch;
  int64_t frequency = 1;
  std::string monitor = "val_loss";  // plateau: the metric it steps on.

  // Linear warm-up from warmup_start_factor times the rate over warmup_iters steps of `interval` (LinearLR; then
  // SequentialLR into the schedule, or beside a plateau scheduler); 0: none. Not with onecycle, which warms up.
  int64_t warmup_iters = 0;
  double warmup_start_factor = 1.0 / 3;

  int64_t step_size = 10;  // step
  double gamma = 0.1;
  int64_t T_max = 0;  // cosine; 0: the run's length in `interval`s (minus the warm-up).  // NOLINT
  double eta_min = 0;
  OneCycleLROptions one_cycle;  // onecycle; max_lr 0: the optimizer's rate; total_steps 0: the run's length.
  // interval kEpoch: the run's length in epochs when it is known (fit: --max_epochs), over which MakeLRSchedulers
  // checks the schedule's rates (a step interval's length is the trainer's estimated_stepping_batches); 0: unknown.
  int64_t run_epochs = 0;
  ReduceLROnPlateauOptions plateau;
};

// The most steps MakeLRSchedulers simulates a schedule for before it builds it (a run longer than that has the
// rest of its schedule checked as it runs). Simulating that many took 0.14 to 0.19 s on the 2-core CI machine
// (-c opt, OneCycleLR, CosineAnnealingLR and StepLR with a warm-up); 10^5 steps, 0.02 s.
inline constexpr int64_t kMaxSimulatedScheduleSteps = 1000000;

// The schedulers `options` describe, over `optimizer` (empty for "none" without warm-up). `run_length` is the run's
// length in `interval`s (epochs, or the trainer's estimated_stepping_batches), -1 when unknown; it fills T_max and
// total_steps left at 0. Before building them, it steps the same schedule over a scratch optimizer with the same
// rates for the whole run (or, when the run's length is not known, the length the schedule names): c10::ValueError
// (which the Trainer reports as a bad setting, before anything is written) when a rate is ever NaN, infinite,
// negative or past float32's range (OneCycleLR with pct_start * total_steps < 1, a div_factor of 1e-320), when the
// run steps the schedule past its end (total_steps shorter than the run), for a setting out of range, naming it, or
// for a run length it needs but does not have.
std::vector<SchedulerConfig> MakeLRSchedulers(torch::optim::Optimizer& optimizer, const LRSchedulerOptions& options,
                                              int64_t run_length);

}  // namespace kiln

#endif  // KILN_TRAINER_OPTIM_LR_SCHEDULER_OPTIONS_H_
