// The user's model: a C++ counterpart of Lightning's LightningModule.
//
// Subclass it, build layers with LibTorch's torch::nn as usual (it is a torch::nn::Module), and implement
// training_step and configure_optimizers. The user-facing methods keep Lightning's snake_case names on purpose, so
// that Lightning users find what they know; everything internal to Kiln uses Google C++ names.
//
// Hooks run on the loop thread. A step or hook may throw (c10::Error, std::exception): the trainer stops, tears the
// device down and returns the error as a Status naming the hook.
#ifndef KILN_TRAINER_CORE_LIGHTNING_MODULE_H_
#define KILN_TRAINER_CORE_LIGHTNING_MODULE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "c10/core/Device.h"
#include "torch/nn/module.h"
#include "torch/optim/optimizer.h"
#include "torch/optim/schedulers/lr_scheduler.h"
#include "trainer/core/batch.h"
#include "trainer/core/metrics.h"

namespace kiln {

// A learning-rate scheduler and when the trainer steps it (Lightning's lr_scheduler_config).
struct SchedulerConfig {
  enum class Interval { kEpoch, kStep };
  std::shared_ptr<torch::optim::LRScheduler> scheduler;
  Interval interval = Interval::kEpoch;  // Step after every epoch, or after every optimizer step.
  int64_t frequency = 1;                 // Every `frequency` epochs or steps.
  // For a MetricScheduler (metric_scheduler.h, e.g. ReduceLROnPlateau) only, and then required: the logged metric
  // it steps on (e.g. "val_loss"), read from the trainer's callback_metrics after validation.
  std::string monitor;
  // When `monitor` has not been logged at a step: true stops fit with an error listing the metrics there are;
  // false skips that step with a warning (Lightning's `strict`).
  bool strict = true;
};

// What configure_optimizers returns: one or more LibTorch optimizers over the module's parameters, and optional
// schedulers. Every optimizer steps on every optimization step (automatic optimization).
struct OptimizerConfig {
  OptimizerConfig() = default;
  template <typename T, typename = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, T>>>
  OptimizerConfig(std::shared_ptr<T> optimizer)  // NOLINT(google-explicit-constructor)
      : optimizers{std::move(optimizer)} {}
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<SchedulerConfig> schedulers;
};

class Trainer;

// What a module sees of the run that trains it (Lightning's self.current_epoch, self.global_step, self.device,
// self.trainer): the Trainer gives one to the module for the length of each fit, validate, test and predict.
class RunView {
 public:
  virtual ~RunView() = default;
  virtual int64_t current_epoch() const = 0;
  virtual int64_t global_step() const = 0;
  virtual c10::Device device() const = 0;
  virtual Trainer* trainer() const = 0;
};

class LightningModule : public torch::nn::Module {
 public:
  ~LightningModule() override = default;

  // The run this module is in, as Lightning's module properties: the epoch and the optimizer steps so far (the
  // Trainer's current_epoch() and global_step()), the device its batches and parameters are on, and the Trainer
  // itself. Outside the Trainer's entry points: 0, 0, the CPU and null.
  int64_t current_epoch() const { return view_ != nullptr ? view_->current_epoch() : 0; }
  int64_t global_step() const { return view_ != nullptr ? view_->global_step() : 0; }
  c10::Device device() const { return view_ != nullptr ? view_->device() : c10::Device(c10::DeviceType::CPU); }
  Trainer* trainer() const { return view_ != nullptr ? view_->trainer() : nullptr; }

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
  // The prediction for one batch; the default runs forward() through `predict_forward`.
  virtual at::Tensor predict_step(const Batch& batch, int64_t batch_idx) {
    (void)batch_idx;
    return predict_forward(batch.input);
  }
  // The steps with the index of the stage's loader (DataModule::val_dataloaders() and the like; 0 with one loader),
  // which the loops call. By default they call the forms above, so override whichever form the model needs.
  virtual void validation_step(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
    (void)dataloader_idx;
    validation_step(batch, batch_idx);
  }
  virtual void test_step(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
    (void)dataloader_idx;
    test_step(batch, batch_idx);
  }
  virtual at::Tensor predict_step(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {
    (void)dataloader_idx;
    return predict_step(batch, batch_idx);
  }
  virtual OptimizerConfig configure_optimizers() = 0;

  // Hooks, in the order the fit loop calls them (see trainer.h for the full order).
  virtual void on_fit_start() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_test_epoch_end() {}
  virtual void on_fit_end() {}

  // Hyper-parameters, saved in checkpoints and sent to loggers (Lightning's save_hyperparameters / hparams).
  void save_hyperparameters(std::map<std::string, std::string> hparams) { hparams_ = std::move(hparams); }
  const std::map<std::string, std::string>& hparams() const { return hparams_; }

  // Records a metric for the current step (see metrics.h for on_step/on_epoch defaults). Only valid inside a step
  // or epoch-end hook; elsewhere it throws c10::Error, as Lightning raises. The name is a view: a literal or a
  // std::string is taken as it is, never copied into a std::string per call (the name is copied once, when the
  // metric is first logged).
  void log(std::string_view name, const at::Tensor& value, LogOptions options = {});
  void log(std::string_view name, double value, LogOptions options = {});
  // log() for each entry, with the same options (Lightning's log_dict).
  void log_dict(const std::map<std::string, at::Tensor>& metrics, const LogOptions& options = {});
  void log_dict(const std::map<std::string, double>& metrics, const LogOptions& options = {});

  // The optimizer steps the running fit will take, as Lightning's trainer.estimated_stepping_batches counts them:
  // each epoch's training batches over accumulate_grad_batches (rounded up) times max_epochs, capped by max_steps.
  // Valid in configure_optimizers, so that a schedule can span the run (a cosine's T_max, a one-cycle's
  // total_steps); -1 outside fit, and when neither max_epochs nor max_steps limits the run.
  int64_t estimated_stepping_batches() const { return estimated_stepping_batches_; }

  // Set by the trainer before configure_optimizers; not for users.
  void set_estimated_stepping_batches(int64_t steps) { estimated_stepping_batches_ = steps; }
  // Set by the trainer for the length of each entry point; not for users.
  void set_run_view(const RunView* view) { view_ = view; }
  // Set by the trainer around each loop; not for users.
  void set_metric_sink(MetricCollector* sink, int64_t batch_size) {
    sink_ = sink;
    batch_size_ = batch_size;
  }

 protected:
  // What the default predict_step calls. Override predict_step, or this, to make predictions.
  virtual at::Tensor predict_forward(const at::Tensor& input);

 private:
  std::map<std::string, std::string> hparams_;
  MetricCollector* sink_ = nullptr;
  const RunView* view_ = nullptr;
  int64_t batch_size_ = 1;
  int64_t estimated_stepping_batches_ = -1;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_LIGHTNING_MODULE_H_
