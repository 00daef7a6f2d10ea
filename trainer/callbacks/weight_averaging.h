// WeightAveraging and EMAWeightAveraging: Lightning 2.6's weight-averaging callbacks (an averaged copy of the
// module's weights, updated after optimizer steps, used for validation and put into the module when training ends),
// with Lightning's names, defaults and update rules. StochasticWeightAveraging (stochastic_weight_averaging.h) is
// Lightning's older, epoch-wise SWA with its own learning-rate schedule.
//
// What it does, as Lightning's does:
//   - after each batch that took an optimizer step (global_step moved past the last update), and after each epoch,
//     should_update(step_idx | epoch_idx) says whether to fold the module's weights into the average (by default
//     after every step, never at an epoch's end);
//   - the first update copies the weights; later ones apply avg_fn (by default the equal average
//     avg + (w - avg) / (n + 1), PyTorch's AveragedModel's; EMAWeightAveraging: decay * avg + (1 - decay) * w);
//     with use_buffers (the default) buffers (BatchNorm's statistics) are averaged too, else they are copied;
//   - each validation run inside fit sees the averaged weights (swapped in at on_validation_epoch_start and back at
//     on_validation_epoch_end); at on_train_end the averaged weights replace the module's.
// Checkpoints keep its state under its state_key() ("WeightAveraging", "EMAWeightAveraging") in "callbacks":
// latest_update_step and latest_update_epoch (integers), n_averaged (integer) and average_model_state ({name:
// tensor}, the module's parameter and buffer names); the checkpoint's state_dict holds the module's own (not
// averaged) weights, so a resumed run continues bit for bit. (Lightning instead swaps the averaged weights into
// state_dict and keeps the module's under current_model_state.) Not with FSDP (a sharded module has no whole copy
// to average): fit refuses it.
#ifndef KILN_TRAINER_CALLBACKS_WEIGHT_AVERAGING_H_
#define KILN_TRAINER_CALLBACKS_WEIGHT_AVERAGING_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "trainer/core/callback.h"

namespace kiln {

// (averaged, current, n_averaged) -> the new averaged value; n_averaged is a 0-dim int64 tensor on the averaged
// value's device, the number of updates folded in so far (at least 1 when it is called).
using AveragingFunction = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

struct WeightAveragingOptions {
  // Where the averaged copy lives ("cpu", "cuda:0"); unset: the module's device when fit starts.
  std::optional<std::string> device;
  // Average the buffers too; false: the copy's buffers follow the module's.
  bool use_buffers = true;
  // Unset: the equal average (PyTorch's get_swa_avg_fn).
  AveragingFunction avg_fn;
};

// PyTorch's get_ema_avg_fn(decay): decay * averaged + (1 - decay) * current.
AveragingFunction EmaAveragingFunction(double decay);

class WeightAveraging : public Callback {
 public:
  explicit WeightAveraging(WeightAveragingOptions options = {});

  // Whether to update after the optimizer step `step_idx` (zero-based; set after a step) or the epoch `epoch_idx`
  // (set at an epoch's end). The default: after every step.
  virtual bool should_update(std::optional<int64_t> step_idx, std::optional<int64_t> epoch_idx) const;

  std::string state_key() const override { return "WeightAveraging"; }
  absl::Status validate_config(const Trainer& trainer) const override;
  void setup(Trainer& trainer, LightningModule& module, Stage stage) override;
  void on_fit_start(Trainer& trainer, LightningModule& module) override;
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, LightningModule& module) override;
  void on_train_end(Trainer& trainer, LightningModule& module) override;
  void on_validation_epoch_start(Trainer& trainer, LightningModule& module) override;
  void on_validation_epoch_end(Trainer& trainer, LightningModule& module) override;
  absl::Status load_state_dict(const CallbackState& state) override;
  CallbackValues value_state_dict() const override;
  absl::Status load_value_state_dict(const CallbackValues& state) override;

  // The averaged weights (parameters, then buffers, in the module's order; empty before fit starts) and how many
  // updates they hold.
  const std::vector<at::Tensor>& averaged_weights() const { return averaged_; }
  int64_t n_averaged() const;
  int64_t latest_update_step() const { return latest_update_step_; }

 private:
  void Update(LightningModule& module);
  void Swap(LightningModule& module);

  WeightAveragingOptions options_;
  std::vector<std::string> names_;      // The module's parameter and buffer names, in averaged_'s order.
  std::vector<at::Tensor> averaged_;    // Parameters, then buffers.
  size_t num_parameters_ = 0;           // How many of averaged_ are parameters.
  at::Tensor n_averaged_;               // 0-dim int64, on the copy's device.
  int64_t latest_update_step_ = 0;
  int64_t latest_update_epoch_ = -1;
  // A checkpoint's averaged state, read before fit starts, put into the copy once it exists (on_fit_start).
  std::optional<CallbackValues> restored_;
};

struct EMAWeightAveragingOptions {
  std::optional<std::string> device;
  bool use_buffers = true;
  double decay = 0.999;
  int64_t update_every_n_steps = 1;
  std::optional<int64_t> update_starting_at_step;
  std::optional<int64_t> update_starting_at_epoch;
};

// Lightning's EMAWeightAveraging: WeightAveraging with the EMA average, updated after every
// update_every_n_steps-th step from update_starting_at_step on, and at each epoch's end from
// update_starting_at_epoch on (when set).
class EMAWeightAveraging final : public WeightAveraging {
 public:
  explicit EMAWeightAveraging(EMAWeightAveragingOptions options = {});
  bool should_update(std::optional<int64_t> step_idx, std::optional<int64_t> epoch_idx) const override;
  std::string state_key() const override { return "EMAWeightAveraging"; }
  absl::Status validate_config(const Trainer& trainer) const override;

 private:
  EMAWeightAveragingOptions ema_options_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_WEIGHT_AVERAGING_H_
