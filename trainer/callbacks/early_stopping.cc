#include "trainer/callbacks/early_stopping.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "trainer/trainer.h"

namespace kiln {

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {
  ParseMonitorMode(options_.mode, "EarlyStopping", &mode_).IgnoreError();  // Reported by validate_config.
  best_score_ =
      mode_ == MonitorMode::kMin ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

std::string EarlyStopping::state_key() const {
  return absl::StrCat("EarlyStopping{'monitor': '", options_.monitor, "', 'mode': '", options_.mode, "'}");
}

std::vector<MonitoredMetric> EarlyStopping::monitored_metrics() const {
  return {{.name = options_.monitor,
           .option = absl::StrCat("EarlyStopping(monitor='", options_.monitor, "')"),
           .strict = options_.strict}};
}

absl::Status EarlyStopping::validate_config(const Trainer& trainer) const {
  (void)trainer;
  MonitorMode mode;
  if (absl::Status status = ParseMonitorMode(options_.mode, "EarlyStopping", &mode); !status.ok()) return status;
  if (options_.monitor.empty()) {
    return absl::InvalidArgumentError(
        "EarlyStopping needs a metric to monitor: pass monitor='val_loss' (or the "
        "name of another logged metric)");
  }
  if (options_.patience < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("EarlyStopping(patience=", options_.patience, ") is not valid; pass an int >= 0"));
  }
  if (options_.min_delta < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("EarlyStopping(min_delta=", options_.min_delta, ") is not valid; pass a value >= 0"));
  }
  return absl::OkStatus();
}

void EarlyStopping::setup(Trainer& trainer, LightningModule& module, Stage stage) {
  // Lightning's default: check where the metric is produced. Without validation, that is the training epoch.
  check_on_train_epoch_end_ = options_.check_on_train_epoch_end.value_or(trainer.options().limit_val_batches.is_zero());
}

void EarlyStopping::on_validation_end(Trainer& trainer, LightningModule& module) {
  if (!check_on_train_epoch_end_) Check(trainer);
}

void EarlyStopping::on_train_epoch_end(Trainer& trainer, LightningModule& module) {
  if (check_on_train_epoch_end_) Check(trainer);
}

void EarlyStopping::Check(Trainer& trainer) {
  if (trainer.sanity_checking() || trainer.options().fast_dev_run > 0) return;
  const MetricMap& metrics = trainer.callback_metrics();
  auto found = metrics.find(options_.monitor);
  if (found == metrics.end()) {
    const std::string message =
        absl::StrCat("Early stopping conditioned on metric `", options_.monitor,
                     "` which is not available. Pass in or modify your `EarlyStopping` callback to use any of the "
                     "following: ",
                     MetricNames(metrics));
    if (options_.strict) throw std::runtime_error(message);
    LOG(WARNING) << message;
    return;
  }
  const double current = found->second;
  std::string reason;
  if (options_.check_finite && !std::isfinite(current)) {
    reason = absl::StrFormat(
        "Monitored metric %s = %g is not finite. Previous best value was %.3f. Signaling "
        "Trainer to stop.",
        options_.monitor, current, best_score_);
  } else if (options_.stopping_threshold.has_value() && Improves(current, *options_.stopping_threshold, mode_)) {
    reason = absl::StrFormat("Stopping threshold reached: %s = %g %s %g. Signaling Trainer to stop.", options_.monitor,
                             current, mode_ == MonitorMode::kMin ? "<" : ">", *options_.stopping_threshold);
  } else if (options_.divergence_threshold.has_value() && Improves(*options_.divergence_threshold, current, mode_)) {
    reason =
        absl::StrFormat("Divergence threshold reached: %s = %g %s %g. Signaling Trainer to stop.", options_.monitor,
                        current, mode_ == MonitorMode::kMin ? ">" : "<", *options_.divergence_threshold);
  } else if (Improves(current, best_score_, mode_, options_.min_delta)) {
    if (std::isfinite(best_score_)) {
      LOG(INFO) << absl::StrFormat("Metric %s improved by %.3f >= min_delta = %g. New best score: %.3f",
                                   options_.monitor, std::abs(best_score_ - current), options_.min_delta, current);
    } else {
      LOG(INFO) << absl::StrFormat("Metric %s improved. New best score: %.3f", options_.monitor, current);
    }
    best_score_ = current;
    wait_count_ = 0;
  } else {
    ++wait_count_;
    if (wait_count_ >= options_.patience) {
      reason = absl::StrFormat(
          "Monitored metric %s did not improve in the last %d records. Best score: %.3f. "
          "Signaling Trainer to stop.",
          options_.monitor, wait_count_, best_score_);
    }
  }
  if (!reason.empty()) {
    stop_reason_ = reason;
    stopped_epoch_ = trainer.current_epoch();
    LOG(INFO) << reason;
    trainer.set_should_stop();
  }
}

CallbackState EarlyStopping::state_dict() const {
  return {{"wait_count", absl::StrCat(wait_count_)},
          {"stopped_epoch", absl::StrCat(stopped_epoch_)},
          {"best_score", absl::StrFormat("%.17g", best_score_)},
          {"patience", absl::StrCat(options_.patience)}};
}

absl::Status EarlyStopping::load_state_dict(const CallbackState& state) {
  int64_t wait_count = 0;
  int64_t stopped_epoch = 0;
  double best_score = 0;
  const auto get = [&](const std::string& key) {
    auto found = state.find(key);
    return found == state.end() ? std::string() : found->second;
  };
  if (!absl::SimpleAtoi(get("wait_count"), &wait_count) || !absl::SimpleAtoi(get("stopped_epoch"), &stopped_epoch) ||
      !absl::SimpleAtod(get("best_score"), &best_score)) {
    return absl::InvalidArgumentError("malformed EarlyStopping state (wait_count, stopped_epoch, best_score)");
  }
  wait_count_ = wait_count;
  stopped_epoch_ = stopped_epoch;
  best_score_ = best_score;
  return absl::OkStatus();
}

}  // namespace kiln
