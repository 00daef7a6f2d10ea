// StochasticWeightAveraging: Lightning's StochasticWeightAveraging (Izmailov et al., "Averaging Weights Leads to Wider
// Optima and Better Generalization", UAI 2018), with its names, defaults and arithmetic.
//
// From the epoch swa_epoch_start (an integer counts from 1; a fraction in [0, 1] is int(fraction * max_epochs)) to
// the last, the learning rate follows PyTorch's SWALR: it anneals from the optimizer's rate to `swa_lrs` over
// `annealing_epochs` epochs ("cos" or "linear"), stepped at each epoch's end, in place of the module's scheduler
// (Lightning swaps it out; Kiln leaves it configured but idle, so checkpoints keep its slot). At the start of each of
// those epochs the module's parameters are folded into an equal average (or `avg_fn`'s); when the last epoch ends the
// averaged parameters replace the module's, and a module with BatchNorm layers has their running statistics
// recomputed: reset, then one pass of training_step over the training batches (no backward, no optimizer step) with
// a cumulative average (momentum None), as Lightning's extra epoch does. Kiln makes that pass inside on_train_end, so
// the run has no extra epoch: current_epoch ends at max_epochs, and there is no validation after it (Lightning's
// extra epoch validates, and its counters end one epoch later). Under DDP each process's pass sees its own shard, so
// BatchNorm statistics differ between ranks, as in Lightning; the averaged parameters are the same on every rank.
//
// Checkpoints keep its state under "StochasticWeightAveraging" in "callbacks", with Lightning's keys: n_averaged and
// latest_update_epoch (integers), scheduler_state (SWALR's {"_step_count", "last_epoch"}; None before the SWA epochs)
// and average_model_state ({name: tensor}: the averaged parameters, and the module's buffers as they were when fit
// started, as Lightning's copy of the module holds them). A resumed run ends bit for bit as an uninterrupted one.
// One optimizer and at most one scheduler, as Lightning; not with FSDP (fit refuses both).
#ifndef KILN_TRAINER_CALLBACKS_STOCHASTIC_WEIGHT_AVERAGING_H_
#define KILN_TRAINER_CALLBACKS_STOCHASTIC_WEIGHT_AVERAGING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ATen/core/Tensor.h"
#include "trainer/callbacks/weight_averaging.h"
#include "trainer/core/callback.h"

namespace kiln {

struct StochasticWeightAveragingOptions {
  // One rate for every parameter group, or one per group. Required, each > 0.
  std::vector<double> swa_lrs;
  // An integer >= 1: that epoch, counted from 1; a double in [0, 1]: int(swa_epoch_start * max_epochs).
  std::variant<int64_t, double> swa_epoch_start = 0.8;
  int64_t annealing_epochs = 10;
  std::string annealing_strategy = "cos";  // "cos" or "linear".
  AveragingFunction avg_fn;                // Unset: the equal average.
  // Where the averaged parameters live; unset: the module's device. Lightning's default: "cpu".
  std::optional<std::string> device = "cpu";
};

class StochasticWeightAveraging final : public Callback {
 public:
  explicit StochasticWeightAveraging(StochasticWeightAveragingOptions options);

  std::string state_key() const override { return "StochasticWeightAveraging"; }
  absl::Status validate_config(const Trainer& trainer) const override;
  void setup(Trainer& trainer, LightningModule& module, Stage stage) override;
  void on_fit_start(Trainer& trainer, LightningModule& module) override;
  void on_train_epoch_start(Trainer& trainer, LightningModule& module) override;
  void on_train_epoch_end(Trainer& trainer, LightningModule& module) override;
  void on_train_end(Trainer& trainer, LightningModule& module) override;
  CallbackValues value_state_dict() const override;
  absl::Status load_value_state_dict(const CallbackValues& state) override;

  // The first and last SWA epochs (zero-based), once fit has started; swa_end is -1 for an unbounded run.
  int64_t swa_start() const;
  int64_t swa_end() const { return max_epochs_ < 0 ? -1 : max_epochs_ - 1; }
  int64_t n_averaged() const;
  // The averaged parameters, in the module's order (empty before fit starts).
  std::vector<at::Tensor> averaged_parameters() const;

 private:
  void UpdateAverage(LightningModule& module);
  void TransferWeights(LightningModule& module);
  void RecomputeBatchNorm(Trainer& trainer, LightningModule& module);
  // SWALR's step: the learning rates for its `step_count_`-th step, from the optimizer's current ones.
  void StepSchedule(Trainer& trainer);

  StochasticWeightAveragingOptions options_;
  int64_t swa_epoch_start_ = 0;  // Resolved at on_fit_start: an epoch counted from 1.
  int64_t max_epochs_ = -1;
  bool has_batch_norm_ = false;
  bool initialized_ = false;
  std::vector<std::string> names_;
  std::vector<at::Tensor> average_;  // The module's parameters (averaged), then its buffers (as at fit start).
  size_t num_parameters_ = 0;
  at::Tensor n_averaged_;
  int64_t init_n_averaged_ = 0;
  int64_t latest_update_epoch_ = -1;
  int64_t step_count_ = 0;  // SWALR's _step_count; 0 until it is made.
  std::optional<int64_t> restored_step_count_;
  std::optional<c10::impl::GenericDict> restored_average_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_STOCHASTIC_WEIGHT_AVERAGING_H_
