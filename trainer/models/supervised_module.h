// SupervisedModule: a LightningModule for supervised learning on (features, label) batches, whatever computes the
// outputs. Subclasses (an MLP, a ConvNet, a TorchScript module) only implement `forward`; the task decides the rest:
//
//   classification: forward returns logits [N, classes]; loss cross-entropy; logs train_loss (step and epoch,
//                   in the progress bar), train_acc (epoch), val_loss and val_acc (both in the progress bar),
//                   test_loss and test_acc; predict_step returns class probabilities (softmax).
//   regression:     forward returns [N] or [N, 1], in standardised units: the model learns (target - mean) / std,
//                   with the training targets' mean and standard deviation (set_target_statistics; kept as the
//                   buffers target_mean and target_std, so checkpoints hold them). The loss is the mean squared
//                   error in those units (train_loss, val_loss, test_loss); val_mae and test_mae (mean absolute
//                   error) and predict_step's values [N] are in the target's own units.
//
// Inputs arrive as [N, features] and are reshaped to [N, input_shape...] first when `input_shape` is set (images
// for convolutional networks). The optimizer is Adam or SGD over every parameter, with the learning-rate schedule of
// `lr_scheduler` (trainer/optim/lr_scheduler_options.h).
#ifndef KILN_TRAINER_MODELS_SUPERVISED_MODULE_H_
#define KILN_TRAINER_MODELS_SUPERVISED_MODULE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainer/core/lightning_module.h"
#include "trainer/data/task.h"
#include "trainer/optim/lr_scheduler_options.h"

namespace kiln {

struct SupervisedOptions {
  Task task = Task::kClassification;
  std::string optimizer = "adam";  // "adam", "adamw" or "sgd" (MakeOptimizer, trainer/optim/fused_optimizers.h).
  bool fused_optimizer = true;     // LibTorch's fused kernels where it has them (MakeOptimizer).
  double learning_rate = 1e-3;
  std::optional<double> momentum;      // sgd; unset: 0.9.
  std::optional<double> weight_decay;  // Unset: PyTorch's default for the optimizer.
  // A schedule over steps whose T_max or total_steps is 0 spans estimated_stepping_batches(); one over epochs
  // needs them set.
  LRSchedulerOptions lr_scheduler;
  std::vector<int64_t> input_shape;  // Per example, e.g. {1, 8, 8}; empty: [features] as given.
};

class SupervisedModule : public LightningModule {
 public:
  explicit SupervisedModule(SupervisedOptions options);

  // Outputs for a batch of inputs already reshaped to input_shape.
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  // Outputs for a batch of any structure (Batch::data: a dictionary of named tensors, say), given whole. The
  // targets are then the batch's "target" tensor. By default refused: the model takes one input tensor.
  virtual at::Tensor forward_structured(const c10::IValue& data);

  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override;
  void validation_step(const Batch& batch, int64_t batch_idx) override;
  void test_step(const Batch& batch, int64_t batch_idx) override;
  at::Tensor predict_step(const Batch& batch, int64_t batch_idx) override;
  OptimizerConfig configure_optimizers() override;

  // Runs one example of `num_features` zeros through the model (in eval mode, without gradients) and checks that
  // the output has the shape the task needs: [1, num_outputs] for classification, [1] or [1, 1] for regression.
  // Errors name what came out and what was expected. Throws nothing.
  absl::Status CheckOutputShape(int64_t num_features, int64_t num_outputs);

  // The metric names training_step and validation_step log, as callbacks see them during fit ("train_loss_step",
  // "train_loss_epoch", "val_loss", ...): what a monitor (ModelCheckpoint, EarlyStopping, ReduceLROnPlateau) may
  // name; fit checks its monitors against them before the run starts.
  std::vector<std::string> logged_metric_names() const override;
  [[deprecated("use logged_metric_names(), LightningModule's declaration of the same list")]]
  std::vector<std::string> LoggedMetricNames() const {
    return logged_metric_names();
  }

  const SupervisedOptions& options() const { return options_; }
  // The learning rate the next configure_optimizers uses (fit's --auto_lr_find sets lr_find's suggestion).
  void set_learning_rate(double learning_rate) { options_.learning_rate = learning_rate; }

  // Regression: the training targets' mean and standard deviation (> 0). Until set, 0 and 1 (targets as they are).
  void set_target_statistics(double mean, double std);

 private:
  // Inputs reshaped to input_shape, and outputs shaped like the targets (regression).
  at::Tensor Outputs(const Batch& batch);
  // The batch's targets: `target`, or a structured batch's "target" tensor.
  static at::Tensor Target(const Batch& batch);
  at::Tensor Loss(const at::Tensor& outputs, const at::Tensor& target) const;
  void LogEvaluation(const std::string& prefix, const at::Tensor& outputs, const at::Tensor& target);

  // Outputs in the target's units (regression).
  at::Tensor Unstandardise(const at::Tensor& outputs) const;

  SupervisedOptions options_;
  at::Tensor target_mean_;  // Regression only: 0-dim buffers.
  at::Tensor target_std_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_MODELS_SUPERVISED_MODULE_H_
