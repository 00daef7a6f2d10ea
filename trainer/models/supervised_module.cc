#include "trainer/models/supervised_module.h"

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hal/compat/error_message.h"
#include "torch/nn/functional/loss.h"
#include "torch/utils.h"
#include "trainer/optim/fused_optimizers.h"

namespace kiln {
namespace {

std::string Shape(const at::Tensor& tensor) { return absl::StrCat("[", absl::StrJoin(tensor.sizes(), ", "), "]"); }

}  // namespace

SupervisedModule::SupervisedModule(SupervisedOptions options) : options_(std::move(options)) {
  if (options_.task == Task::kRegression) {
    target_mean_ = register_buffer("target_mean", at::zeros({}));
    target_std_ = register_buffer("target_std", at::ones({}));
  }
}

void SupervisedModule::set_target_statistics(double mean, double std) {
  if (options_.task != Task::kRegression) return;
  torch::NoGradGuard no_grad;
  target_mean_.fill_(mean);
  target_std_.fill_(std);
}

at::Tensor SupervisedModule::Unstandardise(const at::Tensor& outputs) const {
  return outputs * target_std_.to(outputs.scalar_type()) + target_mean_.to(outputs.scalar_type());
}

at::Tensor SupervisedModule::forward_structured(const c10::IValue& data) {
  TORCH_CHECK_VALUE(false, "this model takes one input tensor, but the batch is ", data.tagKind(),
                    ": a batch of named tensors needs a model whose forward takes them (a TorchScript module whose "
                    "forward takes a Dict[str, Tensor], say)");
}

at::Tensor SupervisedModule::Target(const Batch& batch) {
  if (!batch.structured() || batch.target.defined()) return batch.target;
  return batch["target"];
}

at::Tensor SupervisedModule::Outputs(const Batch& batch) {
  at::Tensor outputs;
  if (batch.structured()) {
    outputs = forward_structured(batch.data);
  } else {
    at::Tensor input = batch.input;
    if (!options_.input_shape.empty()) {
      std::vector<int64_t> shape = {input.size(0)};
      shape.insert(shape.end(), options_.input_shape.begin(), options_.input_shape.end());
      input = input.reshape(shape);
    }
    outputs = forward(input);
  }
  if (options_.task == Task::kRegression && outputs.dim() == 2 && outputs.size(1) == 1) outputs = outputs.squeeze(1);
  return outputs;
}

at::Tensor SupervisedModule::Loss(const at::Tensor& outputs, const at::Tensor& target) const {
  if (options_.task == Task::kClassification) return torch::nn::functional::cross_entropy(outputs, target);
  const at::Tensor standardised = (target.to(outputs.scalar_type()) - target_mean_.to(outputs.scalar_type())) /
                                  target_std_.to(outputs.scalar_type());
  return torch::nn::functional::mse_loss(outputs, standardised);
}

void SupervisedModule::LogEvaluation(const std::string& prefix, const at::Tensor& outputs, const at::Tensor& target) {
  const bool validating = prefix == "val";
  log(prefix + "_loss", Loss(outputs, target), {.prog_bar = validating, .sync_dist = true});
  if (options_.task == Task::kClassification) {
    log(prefix + "_acc", outputs.argmax(1).eq(target).to(at::kFloat).mean(),
        {.prog_bar = validating, .sync_dist = true});
  } else {
    log(prefix + "_mae", (Unstandardise(outputs) - target.to(outputs.scalar_type())).abs().mean(),
        {.prog_bar = validating, .sync_dist = true});
  }
}

std::vector<std::string> SupervisedModule::logged_metric_names() const {
  // train_loss is logged on step and on epoch, so it is seen under the two suffixed names only.
  std::vector<std::string> names = {"train_loss_step", "train_loss_epoch"};
  if (options_.task == Task::kClassification) names.push_back("train_acc");
  names.push_back("val_loss");
  names.push_back(options_.task == Task::kClassification ? "val_acc" : "val_mae");
  return names;
}

at::Tensor SupervisedModule::training_step(const Batch& batch, int64_t batch_idx) {
  at::Tensor outputs = Outputs(batch);
  const at::Tensor target = Target(batch);
  at::Tensor loss = Loss(outputs, target);
  log("train_loss", loss, {.prog_bar = true, .on_step = true, .on_epoch = true, .sync_dist = true});
  if (options_.task == Task::kClassification) {
    log("train_acc", outputs.argmax(1).eq(target).to(at::kFloat).mean(),
        {.on_step = false, .on_epoch = true, .sync_dist = true});
  }
  return loss;
}

void SupervisedModule::validation_step(const Batch& batch, int64_t batch_idx) {
  LogEvaluation("val", Outputs(batch), Target(batch));
}

void SupervisedModule::test_step(const Batch& batch, int64_t batch_idx) {
  LogEvaluation("test", Outputs(batch), Target(batch));
}

at::Tensor SupervisedModule::predict_step(const Batch& batch, int64_t batch_idx) {
  at::Tensor outputs = Outputs(batch);
  return options_.task == Task::kClassification ? outputs.softmax(1) : Unstandardise(outputs);
}

OptimizerConfig SupervisedModule::configure_optimizers() {
  OptimizerConfig config =
      MakeOptimizer(OptimizerSettings{.name = options_.optimizer,
                                      .learning_rate = options_.learning_rate,
                                      .momentum = options_.momentum,
                                      .weight_decay = options_.weight_decay},
                    parameters(), options_.fused_optimizer);
  const bool per_step = options_.lr_scheduler.interval == SchedulerConfig::Interval::kStep;
  config.schedulers =
      MakeLRSchedulers(*config.optimizers[0], options_.lr_scheduler, per_step ? estimated_stepping_batches() : -1);
  return config;
}

absl::Status SupervisedModule::CheckOutputShape(int64_t num_features, int64_t num_outputs) {
  const bool was_training = is_training();
  at::Tensor outputs;
  try {
    torch::NoGradGuard no_grad;
    eval();
    outputs = Outputs({at::zeros({1, num_features}), at::Tensor()});
    train(was_training);
  } catch (const c10::Error& e) {
    train(was_training);
    return absl::InvalidArgumentError(absl::StrCat(
        "the model fails on one example of ", num_features, " features",
        options_.input_shape.empty() ? "" : " reshaped to [1, " + absl::StrJoin(options_.input_shape, ", ") + "]", ": ",
        e.what_without_backtrace()));
  } catch (const std::exception& e) {
    train(was_training);
    return absl::InvalidArgumentError(absl::StrCat("the model fails on one example: ", compat::ExceptionMessage(e)));
  }
  if (options_.task == Task::kClassification) {
    if (outputs.dim() != 2 || outputs.size(0) != 1 || outputs.size(1) != num_outputs) {
      return absl::InvalidArgumentError(absl::StrCat("the model returns ", Shape(outputs),
                                                     " for one example, but classification with ", num_outputs,
                                                     " classes needs logits of shape [1, ", num_outputs,
                                                     "]; change the model's last layer to ", num_outputs, " outputs"));
    }
  } else if (outputs.dim() != 1 || outputs.size(0) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the model returns ", Shape(outputs),
                                                   " for one example, but regression needs one value per example, "
                                                   "[1] or [1, 1]; change the model's last layer to 1 output"));
  }
  if (!at::isFloatingType(outputs.scalar_type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model returns ", outputs.scalar_type(), " values; it must return floating-point outputs"));
  }
  return absl::OkStatus();
}

}  // namespace kiln
