// The user's model: a C++ counterpart of Lightning's LightningModule.
//
// Subclass it, build layers with LibTorch's torch::nn as usual (it is a torch::nn::Module), and implement
// training_step and configure_optimizers. The user-facing methods keep Lightning's snake_case names on purpose, so
// that Lightning users find what they know; everything internal to Kiln uses Google C++ names.
//
// Hooks run on the loop thread. A step or hook may throw (c10::Error, std::exception): the trainer stops, tears the
// device down and returns the error as a Status naming the hook.
#ifndef KILN_TRAINER_LIGHTNING_MODULE_H_
#define KILN_TRAINER_LIGHTNING_MODULE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "torch/nn/module.h"
#include "torch/optim/optimizer.h"
#include "trainer/batch.h"
#include "trainer/metrics.h"

namespace kiln {

// What configure_optimizers returns: one or more LibTorch optimizers over the module's parameters.
struct OptimizerConfig {
  OptimizerConfig() = default;
  template <typename T, typename = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, T>>>
  OptimizerConfig(std::shared_ptr<T> optimizer)  // NOLINT(google-explicit-constructor)
      : optimizers{std::move(optimizer)} {}
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;
};

class LightningModule : public torch::nn::Module {
 public:
  ~LightningModule() override = default;

  // The loss for one training batch; the trainer runs backward on it and steps the optimizers.
  virtual at::Tensor training_step(const Batch& batch, int64_t batch_idx) = 0;
  // Evaluation steps: log what should be measured. No gradients are recorded around them.
  virtual void validation_step(const Batch& batch, int64_t batch_idx) {
    (void)batch;
    (void)batch_idx;
  }
  virtual void test_step(const Batch& batch, int64_t batch_idx) {
    (void)batch;
    (void)batch_idx;
  }
  virtual OptimizerConfig configure_optimizers() = 0;

  // Hooks, in the order the fit loop calls them (see trainer.h for the full order).
  virtual void on_fit_start() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_fit_end() {}

  // Records a metric for the current step (see metrics.h for on_step/on_epoch defaults). Only valid inside a step
  // or epoch-end hook; elsewhere it throws c10::Error, as Lightning raises.
  void log(const std::string& name, const at::Tensor& value, LogOptions options = {});
  void log(const std::string& name, double value, LogOptions options = {});

  // Set by the trainer around each loop; not for users.
  void set_metric_sink(MetricCollector* sink, int64_t batch_size) {
    sink_ = sink;
    batch_size_ = batch_size;
  }

 private:
  MetricCollector* sink_ = nullptr;
  int64_t batch_size_ = 1;
};

}  // namespace kiln

#endif  // KILN_TRAINER_LIGHTNING_MODULE_H_
