// LearningRateMonitor: logs each optimizer's learning rate (Lightning's LearningRateMonitor). Names follow
// Lightning: "lr-Adam", "lr-Adam/pg1" for further parameter groups, "lr-Adam-1" for a second Adam. Needs a logger.
#ifndef KILN_TRAINER_CALLBACKS_LEARNING_RATE_MONITOR_H_
#define KILN_TRAINER_CALLBACKS_LEARNING_RATE_MONITOR_H_

#include <optional>
#include <string>

#include "trainer/core/callback.h"
#include "trainer/core/metrics.h"

namespace kiln {

class LearningRateMonitor final : public Callback {
 public:
  // `logging_interval`: "epoch" logs at the start of every epoch; "step" or unset (Lightning's None) log before
  // the batches of every log_every_n_steps-th step, which also shows every per-epoch change.
  explicit LearningRateMonitor(std::optional<std::string> logging_interval = std::nullopt);

  std::string state_key() const override { return "LearningRateMonitor"; }
  absl::Status validate_config(const Trainer& trainer) const override;
  void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) override;
  void on_train_epoch_start(Trainer& trainer, LightningModule& module) override;

  // The current learning rates, by Lightning's names.
  static MetricMap LearningRates(const Trainer& trainer);

 private:
  std::optional<std::string> logging_interval_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_LEARNING_RATE_MONITOR_H_
