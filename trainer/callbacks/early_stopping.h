// EarlyStopping: stops fit when a monitored metric stops improving (Lightning's EarlyStopping, with its option
// names, defaults and messages).
//
// It checks after each validation run, or at the end of each training epoch when `check_on_train_epoch_end` is
// true (the default when the fit has no validation data). Stops when: the metric has not improved by more than
// `min_delta` for `patience` checks; it is not finite (`check_finite`); it passes `stopping_threshold` (good enough)
// or `divergence_threshold` (hopeless). The trainer honours min_epochs. With `strict`, a metric that was never
// logged stops the run with Lightning's error.
#ifndef KILN_TRAINER_CALLBACKS_EARLY_STOPPING_H_
#define KILN_TRAINER_CALLBACKS_EARLY_STOPPING_H_

#include <optional>
#include <string>

#include "trainer/callbacks/monitor.h"
#include "trainer/core/callback.h"

namespace kiln {

struct EarlyStoppingOptions {
  std::string monitor;
  double min_delta = 0.0;
  int64_t patience = 3;
  std::string mode = "min";
  bool strict = true;
  bool check_finite = true;
  std::optional<double> stopping_threshold;
  std::optional<double> divergence_threshold;
  std::optional<bool> check_on_train_epoch_end;
};

class EarlyStopping final : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options);

  std::string state_key() const override;
  bool is_monitoring() const override { return true; }
  std::vector<MonitoredMetric> monitored_metrics() const override;
  absl::Status validate_config(const Trainer& trainer) const override;
  void setup(Trainer& trainer, LightningModule& module, Stage stage) override;
  void on_validation_end(Trainer& trainer, LightningModule& module) override;
  void on_train_epoch_end(Trainer& trainer, LightningModule& module) override;
  CallbackState state_dict() const override;
  absl::Status load_state_dict(const CallbackState& state) override;

  int64_t wait_count() const { return wait_count_; }
  int64_t stopped_epoch() const { return stopped_epoch_; }
  double best_score() const { return best_score_; }
  // Why it stopped (Lightning's message), empty while it has not.
  const std::string& stop_reason() const { return stop_reason_; }

 private:
  void Check(Trainer& trainer);

  EarlyStoppingOptions options_;
  MonitorMode mode_ = MonitorMode::kMin;
  bool check_on_train_epoch_end_ = false;
  int64_t wait_count_ = 0;
  int64_t stopped_epoch_ = 0;
  double best_score_;
  std::string stop_reason_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_EARLY_STOPPING_H_
