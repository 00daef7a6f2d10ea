// The optimizer step of automatic optimization (Lightning's loops/optimization/automatic.py), and the learning-rate
// schedulers' steps: a room of the training epoch loop, internal to //trainer.
#ifndef KILN_TRAINER_LOOPS_AUTOMATIC_OPTIMIZATION_H_
#define KILN_TRAINER_LOOPS_AUTOMATIC_OPTIMIZATION_H_

#include <cstddef>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "torch/optim/optimizer.h"
#include "trainer/core/lightning_module.h"
#include "trainer/loops/progress.h"

namespace kiln {

struct LoopContext;

// Whether `config` is a ReduceLROnPlateau-style scheduler, which steps with a monitored value.
bool IsMetricScheduler(const SchedulerConfig& config);

class AutomaticOptimization {
 public:
  // Counts its steps in `optim_progress` and `scheduler_progress`, the training epoch loop's. All three outlive it.
  AutomaticOptimization(LoopContext& context, OptimizerProgress& optim_progress,
                        SchedulerProgress& scheduler_progress)
      : context_(context), optim_progress_(optim_progress), scheduler_progress_(scheduler_progress) {}

  // On the first batch of each accumulation window, after training_step and before backward (Lightning's order):
  // per optimizer on_before_zero_grad (callbacks, then the module) and zero_grad (set_to_none).
  void ZeroGrad(LightningModule& model);

  // One step of every optimizer on the accumulated gradients, per optimizer: unscale (16-mixed),
  // on_before_optimizer_step (callbacks, then the module), the module's configure_gradient_clipping (by default
  // gradient_clip_val over that optimizer's parameters), the step (through the precision plugin and the strategy);
  // then the scaler's update, global_step + 1, and the step-interval schedulers that monitor nothing. Metric
  // schedulers step after validation instead (StepScheduler, from the epoch loop).
  absl::Status Step(LightningModule& model);

  // Steps configure_optimizers' scheduler `index` once and counts it: a MetricScheduler with its monitored value from
  // callback_metrics (a missing one is an InvalidArgument error when strict, else a warning and no step).
  absl::Status StepScheduler(size_t index);

 private:
  LoopContext& context_;
  OptimizerProgress& optim_progress_;
  SchedulerProgress& scheduler_progress_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_AUTOMATIC_OPTIMIZATION_H_
