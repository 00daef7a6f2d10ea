// DeviceStatsMonitor: logs the accelerator's own device statistics around training batches (Lightning's
// DeviceStatsMonitor). This is where the HAL shows itself to users: the keys are whatever the backend documents,
// prefixed "DeviceStatsMonitor.on_train_batch_start/" and "DeviceStatsMonitor.on_train_batch_end/". Logged every
// log_every_n_steps steps. Needs a logger.
#ifndef KILN_TRAINER_CALLBACKS_DEVICE_STATS_MONITOR_H_
#define KILN_TRAINER_CALLBACKS_DEVICE_STATS_MONITOR_H_

#include <string>

#include "trainer/core/callback.h"

namespace kiln {

class DeviceStatsMonitor final : public Callback {
 public:
  std::string state_key() const override { return "DeviceStatsMonitor"; }
  absl::Status validate_config(const Trainer& trainer) const override;
  void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) override;
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override;

 private:
  void Log(Trainer& trainer, const std::string& hook);
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_DEVICE_STATS_MONITOR_H_
