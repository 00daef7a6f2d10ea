#include "trainer/callbacks/device_stats_monitor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {

absl::Status DeviceStatsMonitor::validate_config(const Trainer& trainer) const {
  if (trainer.loggers().empty()) {
    return absl::InvalidArgumentError(
        "Cannot use `DeviceStatsMonitor` callback with a Trainer that has no logger; add a logger to the Trainer");
  }
  return absl::OkStatus();
}

void DeviceStatsMonitor::Log(Trainer& trainer, const std::string& hook) {
  const int64_t every = trainer.options().log_every_n_steps;
  if (every <= 0 || trainer.global_step() % every != 0) return;
  absl::StatusOr<DeviceStats> stats =
      trainer.plan()->accelerator->GetDeviceStats(trainer.plan()->root_logical_device());
  if (!stats.ok()) {
    LOG(WARNING) << "DeviceStatsMonitor: " << stats.status();
    return;
  }
  MetricMap metrics;
  for (const auto& [key, value] : *stats) metrics[absl::StrCat("DeviceStatsMonitor.", hook, "/", key)] = value;
  trainer.log_metrics(std::move(metrics), trainer.logged_step());
}

void DeviceStatsMonitor::on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                                              int64_t batch_idx) {
  Log(trainer, "on_train_batch_start");
}

void DeviceStatsMonitor::on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs,
                                            const Batch& batch, int64_t batch_idx) {
  Log(trainer, "on_train_batch_end");
}

}  // namespace kiln
