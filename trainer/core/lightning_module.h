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
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ATen/core/Dict.h"
#include "ATen/core/ivalue.h"
#include "c10/core/Device.h"
#include "torch/nn/module.h"
#include "torch/optim/optimizer.h"
#include "torch/optim/schedulers/lr_scheduler.h"
#include "trainer/core/batch.h"
#include "trainer/core/data_loader.h"
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

// What configure_optimizers returns: LibTorch optimizers over the module's parameters, and optional schedulers. Under
// automatic optimization, one optimizer, which steps on every optimization step; several are refused before
// anything runs, as in Lightning 2.x: they need manual optimization (automatic_optimization() false), where
// training_step steps each itself.
struct OptimizerConfig {
  OptimizerConfig() = default;
  template <typename T, typename = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, T>>>
  OptimizerConfig(std::shared_ptr<T> optimizer)  // NOLINT(google-explicit-constructor)
      : optimizers{std::move(optimizer)} {}
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<SchedulerConfig> schedulers;
};

class Trainer;
class LightningModule;
class DeviceMesh;  // trainer/core/device_mesh.h (//trainer/core:tensor_parallel).

// What a module sees of the run that trains it (Lightning's self.current_epoch, self.global_step, self.device,
// self.trainer): the Trainer gives one to the module for the length of each fit, validate, test and predict.
class RunView {
 public:
  virtual ~RunView() = default;
  virtual int64_t current_epoch() const = 0;
  virtual int64_t global_step() const = 0;
  virtual c10::Device device() const = 0;
  virtual Trainer* trainer() const = 0;
  // This process's rank among all the run's processes, and on its node (Trainer::global_rank, local_rank). The
  // defaults: one process.
  virtual int global_rank() const { return 0; }
  virtual int local_rank() const { return 0; }
  // `batch` on `device` as the run's strategy moves batches (what the default transfer_batch_to_device does).
  virtual Batch MoveBatch(const Batch& batch, c10::Device device) const = 0;
  // Clips `parameters`' gradients to a total 2-norm of `max_norm` as the run's strategy takes the norm (over every
  // rank's shard when it shards them). The default: ClipGradNorm over these gradients.
  virtual void ClipGradientsNorm(const std::vector<at::Tensor>& parameters, double max_norm) const;
  // The run's device mesh (LightningModule::device_mesh); the default: none.
  virtual std::shared_ptr<const DeviceMesh> device_mesh() const { return nullptr; }
};

// What the training loop does for a module that optimizes by hand (automatic_optimization() false): the trainer
// gives one to the module for the length of each training_step. Not for users: they call the module's
// manual_backward and the LightningOptimizer's step, which come here.
class ManualOptimizationDriver {
 public:
  virtual ~ManualOptimizationDriver() = default;
  virtual std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers() const = 0;
  // The module's parameters that optimizer `index` was built with (configure_optimizers'), whatever the strategy
  // made of the optimizer since (fsdp points it at its shards).
  virtual std::vector<at::Tensor> optimizer_parameters(size_t index) const = 0;
  virtual size_t num_schedulers() const = 0;
  // Checks `loss` (a non-finite loss stops or skips as on_nonfinite_loss says), then the backward hooks around the
  // precision plugin's scaling and the strategy's backward (all-reduced under DDP).
  virtual void Backward(const at::Tensor& loss) = 0;
  // The precision plugin's unscaling of optimizer `index`'s gradients, once per step (clip_gradients).
  virtual void UnscaleGradients(size_t index) = 0;
  // Unscaling, on_before_optimizer_step, the step through the precision plugin and the strategy, the scaler's
  // update, global_step + 1.
  virtual void Step(size_t index) = 0;
  // Scheduler `index` steps once (with `metric` for a MetricScheduler), counted for checkpoints.
  virtual void StepScheduler(size_t index, std::optional<double> metric) = 0;
  // The module whose training_step runs (toggle_model toggles its parameters).
  virtual LightningModule& module() const = 0;
  // Whether manual_backward all-reduces the gradients under a distributed strategy (true, the default each batch) or
  // accumulates them on each rank (DDP's no_sync; Lightning's toggle_model(sync_grad=False)). Returns the previous.
  virtual bool SetGradientSync(bool sync) = 0;
};

class LightningOptimizer;

// What LightningOptimizer::toggle_model and LightningModule::toggled_optimizer return: while it lives, only the
// optimizer's parameters take gradients (toggle_optimizer) and, without sync_grad, manual_backward keeps each rank's
// gradients local (no all-reduce, as DDP's no_sync); its end restores both. Move-only; belongs to training_step.
class ToggledModel {
 public:
  ToggledModel(ToggledModel&& other) noexcept;
  ToggledModel(const ToggledModel&) = delete;
  ToggledModel& operator=(const ToggledModel&) = delete;
  ToggledModel& operator=(ToggledModel&&) = delete;
  ~ToggledModel();

 private:
  friend class LightningOptimizer;
  friend class LightningModule;
  ToggledModel(LightningModule& module, const LightningOptimizer& optimizer, ManualOptimizationDriver* driver,
               std::optional<bool> sync_grad);

  LightningModule* module_;
  const LightningOptimizer* optimizer_;
  ManualOptimizationDriver* driver_;  // Null when the gradient sync was left alone.
  bool previous_sync_ = true;
};

// One of the module's optimizers as manual optimization uses it (Lightning's LightningOptimizer, from
// LightningModule::optimizers()): step() goes through the trainer (precision plugin, strategy, hooks, global_step).
class LightningOptimizer {
 public:
  LightningOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, size_t index,
                     ManualOptimizationDriver* driver)
      : optimizer_(std::move(optimizer)), index_(index), driver_(driver) {}
  // One optimizer step on the gradients manual_backward accumulated: with 16-mixed the scaler unscales them (and
  // skips the step on an inf), on_before_optimizer_step runs, then the step, and global_step grows by one (so two
  // optimizers stepped per batch count two steps, as in Lightning).
  void step();
  // Lightning's step(closure): runs `closure` (which computes the loss and calls manual_backward), then steps.
  void step(const std::function<void()>& closure);
  // Drops every gradient of this optimizer's parameters (set_to_none, as Lightning's default).
  void zero_grad();
  // Lightning's toggle_model: only this optimizer's parameters take gradients while the returned guard lives and,
  // with sync_grad false, manual_backward accumulates each rank's gradients locally without the all-reduce (for
  // gradient accumulation under DDP: the backward of the window's last batch, with sync_grad true, all-reduces the
  // sum). Valid in training_step under manual optimization.
  [[nodiscard]] ToggledModel toggle_model(bool sync_grad = true) const;
  torch::optim::Optimizer& optimizer() const { return *optimizer_; }
  size_t index() const { return index_; }
  // The module's parameters this optimizer steps, as configure_optimizers built it (a sharding strategy such as fsdp
  // points the optimizer itself at its shards).
  std::vector<at::Tensor> parameters() const;

 private:
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  size_t index_;
  ManualOptimizationDriver* driver_;
};

// One of configure_optimizers' schedulers for manual optimization (LightningModule::lr_schedulers()): the user
// steps it; each step is counted, so that a checkpoint resumes the schedule exactly.
class LightningScheduler {
 public:
  LightningScheduler(size_t index, ManualOptimizationDriver* driver) : index_(index), driver_(driver) {}
  void step();
  // For a MetricScheduler (ReduceLROnPlateau): the monitored value.
  void step(double metric);
  size_t index() const { return index_; }

 private:
  size_t index_;
  ManualOptimizationDriver* driver_;
};

// torch::optim::Optimizer::zero_grad() as Python's set_to_none does it: each parameter's gradient is dropped.
// LibTorch's C++ zero_grad detaches every gradient in place first (an operator call a parameter, some 700 instructions
// each on the tiny MLP, issue #41); a gradient about to be dropped need not be detached.
void ZeroGradToNone(torch::optim::Optimizer& optimizer);

// LibTorch's clip_grad_norm_ with the 2-norm, operator for operator (so the gradients come out bit for bit the
// same), without its last step: it returns nothing, where LibTorch returns the total norm as a double, a host read
// that would make every clipped step wait for the device.
void ClipGradNorm(const std::vector<at::Tensor>& parameters, double max_norm);

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
  // Lightning's self.global_rank and self.local_rank: this process's rank among all the run's processes, and on its
  // node (the Trainer's global_rank() and local_rank(); trainer()->world_size() and the rest are the Trainer's).
  // Outside the Trainer's entry points: 0.
  int global_rank() const { return view_ != nullptr ? view_->global_rank() : 0; }
  int local_rank() const { return view_ != nullptr ? view_->local_rank() : 0; }
  // Lightning's self.device_mesh: the data x tensor parallel mesh of a run under model_parallel
  // (trainer/core/device_mesh.h; its groups for the layers of trainer/core/tensor_parallel.h), set before
  // configure_model. Null under every other strategy and outside the Trainer's entry points.
  std::shared_ptr<const DeviceMesh> device_mesh() const { return view_ != nullptr ? view_->device_mesh() : nullptr; }

  // The loss for one training batch; the trainer runs backward on it and steps the optimizers. Under manual
  // optimization the step does that itself (manual_backward, optimizers()) and may return an undefined tensor.
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

  // Hooks, as Lightning's LightningModule has them. The loops call each right after the callbacks' hook of the same
  // name (callback.h gives the whole order, which is Lightning's: tests/lightning/hook_order_test compares the two).
  virtual void setup(Stage stage) { (void)stage; }
  // Lightning's configure_model: where a model builds the layers that depend on the run (its tensor-parallel layers,
  // from device_mesh()). Called at the start of each entry point (fit, validate, test, predict), once the processes
  // have met and the strategy's environment (its device mesh) is set up, and before the strategy places the model on
  // its device, converts its layers (sync_batchnorm, precision) or hands its parameters to configure_optimizers; so
  // it must be idempotent (build the layers only when they are not built yet). The default does nothing. Under ddp and
  // fsdp, which meet the other processes while placing the model, it runs before they meet. Unlike Lightning, which
  // calls it after the setup hooks, Kiln calls it before them (Kiln's strategies place the model before setup runs).
  virtual void configure_model() {}
  virtual void teardown(Stage stage) { (void)stage; }
  virtual void on_fit_start() {}
  virtual void on_fit_end() {}
  virtual void on_train_start() {}
  virtual void on_train_end() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  // Returning -1 skips the rest of this epoch's training batches (Lightning's convention).
  virtual int on_train_batch_start(const Batch& batch, int64_t batch_idx) {
    (void)batch;
    (void)batch_idx;
    return 0;
  }
  // `outputs`: training_step's loss, detached (undefined when a manual step returned none).
  virtual void on_train_batch_end(const at::Tensor& outputs, const Batch& batch, int64_t batch_idx);
  virtual void on_validation_start() {}
  virtual void on_validation_end() {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_validation_batch_start(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {}
  virtual void on_validation_batch_end(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {}
  virtual void on_test_start() {}
  virtual void on_test_end() {}
  virtual void on_test_epoch_start() {}
  virtual void on_test_epoch_end() {}
  virtual void on_test_batch_start(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {}
  virtual void on_test_batch_end(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {}
  virtual void on_predict_start() {}
  virtual void on_predict_end() {}
  virtual void on_predict_epoch_start() {}
  virtual void on_predict_epoch_end() {}
  virtual void on_predict_batch_start(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) {}
  // `outputs`: what predict_step returned.
  virtual void on_predict_batch_end(const at::Tensor& outputs, const Batch& batch, int64_t batch_idx,
                                    int64_t dataloader_idx) {}
  // Where validation, testing and prediction put the module in eval mode, and where validation and testing put it
  // back in train mode after their end hooks (the defaults call eval() / train()).
  virtual void on_validation_model_eval() { eval(); }
  virtual void on_validation_model_train() { train(); }
  virtual void on_test_model_eval() { eval(); }
  virtual void on_test_model_train() { train(); }
  virtual void on_predict_model_eval() { eval(); }

  // Every batch of every stage passes these three, in this order, before its batch-start hooks: the loader's batch,
  // then on the device (the default moves every tensor there as the strategy does, non-blocking where the source
  // allows), then on the device after the move. Each returns the batch the next one gets.
  virtual Batch on_before_batch_transfer(Batch batch, int64_t dataloader_idx) {
    (void)dataloader_idx;
    return batch;
  }
  virtual Batch transfer_batch_to_device(const Batch& batch, c10::Device device, int64_t dataloader_idx);
  virtual Batch on_after_batch_transfer(Batch batch, int64_t dataloader_idx) {
    (void)dataloader_idx;
    return batch;
  }

  // The optimization hooks (automatic optimization: on_before_zero_grad on the first batch of each accumulation
  // window; on_before_optimizer_step and configure_gradient_clipping on its last). `loss` is what backward runs on
  // (divided for accumulate_grad_batches, scaled by a 16-mixed precision plugin).
  virtual void on_before_zero_grad(torch::optim::Optimizer& optimizer) {}
  virtual void on_before_backward(const at::Tensor& loss) {}
  virtual void on_after_backward() {}
  virtual void on_before_optimizer_step(torch::optim::Optimizer& optimizer) {}
  // Clips `optimizer`'s gradients before its step, with the Trainer's gradient_clip_val and gradient_clip_algorithm
  // (unset when the Trainer has none); the default calls clip_gradients with them.
  virtual void configure_gradient_clipping(torch::optim::Optimizer& optimizer,
                                           std::optional<double> gradient_clip_val,
                                           std::optional<std::string> gradient_clip_algorithm);
  // Clips the gradients of `optimizer`'s parameters: "norm" (the default) scales them so that their 2-norm is at
  // most `gradient_clip_val`, "value" clamps each to [-gradient_clip_val, gradient_clip_val]. Unset or 0: nothing.
  // Under manual optimization with 16-mixed, the gradients are unscaled first. Another algorithm throws.
  void clip_gradients(torch::optim::Optimizer& optimizer, std::optional<double> gradient_clip_val,
                      std::optional<std::string> gradient_clip_algorithm = std::nullopt);

  // Lightning's flops_per_batch attribute: the FLOPs one batch of this module costs (a training batch: forward and
  // backward), which ThroughputMonitor turns into FLOP/s and MFU. std::nullopt (the default): ThroughputMonitor counts
  // them itself, on the first batch of each stage (FlopCounter, trainer/core/flop_counter.h); MeasureFlops there
  // computes a figure to return here.
  virtual std::optional<int64_t> flops_per_batch() const { return std::nullopt; }

  // The checkpoint's dictionary, as Lightning's hooks get it. on_save_checkpoint may add entries under keys of its
  // own (values torch.save can hold: tensors, numbers, strings, lists, dictionaries; tensors are copied at the step);
  // a key Kiln writes is refused. on_load_checkpoint sees the whole dictionary read back, before the module's
  // parameters are loaded, when fit resumes and when validate, test or predict load a checkpoint.
  virtual void on_save_checkpoint(c10::impl::GenericDict& checkpoint) { (void)checkpoint; }
  virtual void on_load_checkpoint(const c10::impl::GenericDict& checkpoint) { (void)checkpoint; }

  // Manual optimization (Lightning's automatic_optimization = False): the trainer calls training_step and leaves
  // backward, the optimizer steps and zero_grad to it, through manual_backward and optimizers(). The trainer's
  // accumulate_grad_batches and gradient_clip_val are refused then (accumulate and clip in the step instead), and
  // the schedulers step only when the step calls lr_schedulers()[i].step().
  bool automatic_optimization() const { return automatic_optimization_; }
  void set_automatic_optimization(bool automatic) { automatic_optimization_ = automatic; }
  // configure_optimizers' optimizers and schedulers, in order. Valid in training_step under manual optimization;
  // elsewhere they throw.
  std::vector<LightningOptimizer> optimizers() const;
  std::vector<LightningScheduler> lr_schedulers() const;
  // Backward on `loss` with the trainer's precision plugin and strategy (all-reduced under DDP) and the backward
  // hooks. A non-finite loss stops the run or skips the batch's remaining steps, as on_nonfinite_loss says.
  void manual_backward(const at::Tensor& loss);
  // Only `optimizer`'s parameters take gradients until untoggle_optimizer: the module's other parameters are set not
  // to require them (a GAN's generator step leaves the discriminator's alone). untoggle_optimizer restores what each
  // parameter required before.
  void toggle_optimizer(const LightningOptimizer& optimizer);
  void untoggle_optimizer(const LightningOptimizer& optimizer);
  // Lightning's toggled_optimizer: toggle_optimizer now, untoggle_optimizer when the returned guard goes.
  [[nodiscard]] ToggledModel toggled_optimizer(const LightningOptimizer& optimizer);

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

  // The metrics this module logs during fit, as callbacks see them in callback_metrics ("train_loss_step" and
  // "train_loss_epoch" for one logged on step and on epoch, "val_loss"): Kiln's addition, so that fit can check
  // every monitor (ModelCheckpoint's, EarlyStopping's, a scheduler's) by its name before the run starts, and refuse a
  // mistyped one before anything is written. Declare all of them or none: when the list is not empty, a monitor
  // outside it (and outside what a dry validation step logs, when one runs) stops fit with InvalidArgument. Empty
  // (the default): a monitor is checked against the schedule only, and a name nobody logs is found when it is first
  // read, as Lightning finds it. Must not throw.
  virtual std::vector<std::string> logged_metric_names() const { return {}; }

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
  // Set by the trainer around each manual training_step; not for users.
  void set_manual_optimization_driver(ManualOptimizationDriver* driver) { driver_ = driver; }
  // Whether on_train_batch_end is this class's (which does nothing): the loop then spares the detach of `outputs`.
  // Not for users.
  bool train_batch_end_is_default() const { return train_batch_end_is_default_; }

 protected:
  // What the default predict_step calls. Override predict_step, or this, to make predictions.
  virtual at::Tensor predict_forward(const at::Tensor& input);

 private:
  ManualOptimizationDriver& Driver(const char* what) const;

  std::map<std::string, std::string> hparams_;
  MetricCollector* sink_ = nullptr;
  const RunView* view_ = nullptr;
  ManualOptimizationDriver* driver_ = nullptr;
  int64_t batch_size_ = 1;
  int64_t estimated_stepping_batches_ = -1;
  bool automatic_optimization_ = true;
  bool train_batch_end_is_default_ = false;
  // What toggle_optimizer changed: each parameter it set not to require gradients, and what it required before.
  std::vector<std::pair<at::Tensor, bool>> toggled_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_CORE_LIGHTNING_MODULE_H_
