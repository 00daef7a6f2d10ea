// ReduceLROnPlateau: multiplies the rates by `factor` once the monitored value has not improved for more than
// `patience` steps (PyTorch's ReduceLROnPlateau: its settings, defaults, arithmetic and state_dict keys). The trainer
// steps it with the SchedulerConfig's `monitor` (trainer/core/metric_scheduler.h); checkpoints keep its state.
#ifndef KILN_TRAINER_OPTIM_REDUCE_LR_ON_PLATEAU_H_
#define KILN_TRAINER_OPTIM_REDUCE_LR_ON_PLATEAU_H_

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/core/metric_scheduler.h"

namespace kiln {

// PyTorch's names and defaults.
struct ReduceLROnPlateauOptions {
  std::string mode = "min";            // "min": lower is better; "max": higher is.
  double factor = 0.1;                 // In (0, 1).
  int64_t patience = 10;               // Steps without improvement that are tolerated.
  double threshold = 1e-4;             // How much better counts as better...
  std::string threshold_mode = "rel";  // ...relative to the best ("rel") or in absolute terms ("abs").
  int64_t cooldown = 0;                // Steps after a reduction before bad steps count again.
  double min_lr = 0;                   // No rate goes below it.
  double eps = 1e-8;                   // A reduction smaller than this is not applied.
};

class ReduceLROnPlateau final : public MetricScheduler {
 public:
  // Throws c10::Error naming the setting that is out of range.
  ReduceLROnPlateau(torch::optim::Optimizer& optimizer, ReduceLROnPlateauOptions options = {});

  void step(double metric) override;
  using MetricScheduler::step;
  c10::impl::GenericDict state_dict() const override;
  absl::Status CheckStateDict(const c10::impl::GenericDict& state) const override;
  void load_state_dict(const c10::impl::GenericDict& state) override;

  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }
  int64_t last_epoch() const { return last_epoch_; }

 private:
  bool IsBetter(double value) const;

  torch::optim::Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  double mode_worse_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_epoch_ = 0;
};

}  // namespace kiln

#endif  // KILN_TRAINER_OPTIM_REDUCE_LR_ON_PLATEAU_H_
