// kiln::LRScheduler: the base of Kiln's learning-rate schedulers (this package), which count as PyTorch's
// torch.optim.lr_scheduler does rather than as LibTorch's: building one takes PyTorch's initial step (last_epoch 0,
// e.g. a warm-up's first rate is in place before the first optimizer step), and after k calls of step() last_epoch
// is k and the rates are what PyTorch's scheduler of the same name and settings gives after k steps. LibTorch's own
// StepLR counts its first step() as PyTorch's construction, one behind. They derive from LibTorch's LRScheduler, so
// SchedulerConfig (trainer/core/lightning_module.h) holds them like any other, and checkpoints resume them by
// replaying last_epoch steps from a fresh scheduler (each rate depends only on the count and the settings).
//
// Thread-safety: none; the loop thread owns a scheduler and its optimizer, which must outlive it.
#ifndef KILN_TRAINER_OPTIM_LR_SCHEDULER_H_
#define KILN_TRAINER_OPTIM_LR_SCHEDULER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "torch/optim/optimizer.h"
#include "torch/optim/schedulers/lr_scheduler.h"

namespace kiln {

class LRScheduler : public torch::optim::LRScheduler {
 public:
  ~LRScheduler() override = default;

  // How many steps the schedule has taken: 0 after construction.
  int64_t last_epoch() const { return static_cast<int64_t>(step_count_) - 1; }
  // The rates the schedule started from (PyTorch's base_lrs, its param groups' initial_lr): each group's rate when
  // the scheduler was built.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // The optimizer's rates now (PyTorch's get_last_lr()).
  std::vector<double> get_last_lr() const { return get_current_lrs(); }

  // A point where the schedule changes course: after `step` steps (last_epoch == step), as `setting` set it.
  struct Milestone {
    int64_t step;
    std::string setting;  // "StepLR(step_size=10)", "SequentialLR(milestones[0]=5)".
  };
  // The schedule's milestones in increasing order (StepLR's first decay, SequentialLR's switches and those of the
  // schedules it runs), so that fit can refuse, before the run starts, a schedule that the run never steps far
  // enough to do what it was set to do (trainer/loops/preflight.h). Empty for schedules that change the rate from
  // their first step. Must not throw.
  virtual std::vector<Milestone> milestones() const { return {}; }

 protected:
  explicit LRScheduler(torch::optim::Optimizer& optimizer);

  // The rates for `epoch` (the last_epoch this step moves to). A recursive schedule (PyTorch's get_lr) reads the
  // current ones with get_current_lrs(); keep the same arithmetic as PyTorch, so that rates agree to the last bit
  // or nearly. May throw c10::Error (a one-cycle stepped past its end).
  virtual std::vector<double> ComputeLrs(int64_t epoch) = 0;
  // The rates for `epoch` from base_lrs alone (PyTorch's _get_closed_form_lr), used when SequentialLR restarts the
  // schedule at 0. The default is ComputeLrs, for schedules that are closed-form already.
  virtual std::vector<double> ClosedFormLrs(int64_t epoch) { return ComputeLrs(epoch); }
  // PyTorch's initial step; the most-derived constructor calls it last, once its settings are in place.
  void InitialStep() { step(); }

  torch::optim::Optimizer& optimizer() { return optimizer_; }
  // Sets each param group's rate (LibTorch keeps its own setter private).
  void SetLrs(const std::vector<double>& lrs);

 private:
  friend class SequentialLR;  // Restarts, rebases and rewinds the schedules it runs one after another.

  std::vector<double> get_lrs() final;
  // PyTorch's step(0): last_epoch back to 0, with the closed-form rates.
  void Restart();

  torch::optim::Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  bool restarting_ = false;
};

}  // namespace kiln

#endif  // KILN_TRAINER_OPTIM_LR_SCHEDULER_H_
