// MetricScheduler: the contract of a learning-rate scheduler that steps on a monitored value rather than on a count
// (PyTorch's ReduceLROnPlateau; Lightning's `reduce_on_plateau` schedulers). Its state (the best value so far, the
// bad epochs, the cool-down) depends on the values it saw, so a checkpoint cannot rebuild it by replaying steps as it
// does for the other schedulers: checkpoints keep state_dict() in the scheduler's lr_schedulers entry instead.
//
// The trainer steps it with the value of the SchedulerConfig's `monitor` (lightning_module.h) from callback_metrics,
// every `frequency` epochs or optimizer steps, after validation; it never calls the count-based step().
//
// Thread-safety: none; the loop thread owns it.
#ifndef KILN_TRAINER_CORE_METRIC_SCHEDULER_H_
#define KILN_TRAINER_CORE_METRIC_SCHEDULER_H_

#include <vector>

#include "ATen/core/Dict.h"
#include "ATen/core/ivalue.h"
#include "absl/status/status.h"
#include "torch/optim/optimizer.h"
#include "torch/optim/schedulers/lr_scheduler.h"

namespace kiln {

class MetricScheduler : public torch::optim::LRScheduler {
 public:
  explicit MetricScheduler(torch::optim::Optimizer& optimizer) : LRScheduler(optimizer) {}
  ~MetricScheduler() override = default;

  // One step with the monitored value (PyTorch's step(metrics)); may change the optimizer's learning rates. May
  // throw c10::Error (a non-finite value is a value, as in PyTorch: it is never better than the best).
  virtual void step(double metric) = 0;
  // The count-based step, kept visible beside step(double) for code that holds a torch::optim::LRScheduler; on a
  // metric scheduler it changes no learning rate.
  using LRScheduler::step;

  // Everything needed to continue exactly, under PyTorch's keys for the same scheduler (what its state_dict()
  // holds), so that PyTorch can read it and a checkpoint PyTorch wrote can be read back.
  virtual c10::impl::GenericDict state_dict() const = 0;
  // OK when load_state_dict would accept `state`; otherwise an error naming the key. Changes nothing.
  virtual absl::Status CheckStateDict(const c10::impl::GenericDict& state) const = 0;
  // Puts back what CheckStateDict accepted (it must have); the settings (mode, factor, patience, ...) stay this
  // scheduler's, as every other scheduler's settings come from configure_optimizers and only its progress from the
  // checkpoint.
  virtual void load_state_dict(const c10::impl::GenericDict& state) = 0;

 protected:
  // What the count-based step() sets: the rates as they are.
  std::vector<double> get_lrs() override { return get_current_lrs(); }
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_METRIC_SCHEDULER_H_
