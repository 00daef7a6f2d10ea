#include "trainer/loops/automatic_optimization.h"

#include <string>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "torch/nn/utils/clip_grad.h"
#include "trainer/callbacks/monitor.h"
#include "trainer/core/metric_scheduler.h"
#include "trainer/loops/call_user.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {

void ClipGradNorm(const std::vector<at::Tensor>& parameters, double max_norm) {
  std::vector<at::Tensor> grads;
  std::vector<at::Tensor> norms;
  for (const at::Tensor& parameter : parameters) {
    if (!parameter.grad().defined()) continue;
    grads.push_back(parameter.grad());
    norms.push_back(parameter.grad().data().norm(2));
  }
  if (grads.empty()) return;
  const at::Tensor total_norm = norms.size() == 1 ? norms[0] : at::stack(norms).norm(2);
  const at::Tensor clip_coef = max_norm / (total_norm + 1e-6);
  const at::Tensor clip_coef_clamped = at::clamp(clip_coef, c10::nullopt, 1.0);
  for (const at::Tensor& grad : grads) grad.data().mul_(clip_coef_clamped);
}

bool IsMetricScheduler(const SchedulerConfig& config) {
  return dynamic_cast<const MetricScheduler*>(config.scheduler.get()) != nullptr;
}

void AutomaticOptimization::ClipGradients(LightningModule& model) {
  const TrainerOptions& options = trainer_.options_;
  if (!options.gradient_clip_val.has_value() || *options.gradient_clip_val <= 0) return;
  const std::vector<at::Tensor> parameters = model.parameters();
  if (options.gradient_clip_algorithm == "norm") {
    ClipGradNorm(parameters, *options.gradient_clip_val);
  } else {
    torch::nn::utils::clip_grad_value_(parameters, *options.gradient_clip_val);
  }
}

void ZeroGradToNone(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    for (at::Tensor& param : group.params()) {
      param.mutable_grad().reset();
    }
  }
}

absl::Status AutomaticOptimization::Step(LightningModule& model) {
  Trainer& trainer = trainer_;
  PrecisionPlugin& precision = *trainer.precision_;
  return CallUser("optimizer step", [&] {
    // Clipping and on_before_optimizer_step see true gradients: 16-mixed unscales them first (precision_plugin.h).
    for (const auto& optimizer : trainer.optimizers_.optimizers) precision.UnscaleGradients(*optimizer);
    ClipGradients(model);
    for (const auto& optimizer : trainer.optimizers_.optimizers) {
      trainer.CallCallbacks([&](Callback& c) { c.on_before_optimizer_step(trainer, model, *optimizer); });
      precision.OptimizerStep(*optimizer, [&] { trainer.strategy_->OptimizerStep(*optimizer); });
      trainer.CallCallbacks([&](Callback& c) { c.on_before_zero_grad(trainer, model, *optimizer); });
      ZeroGradToNone(*optimizer);
    }
    precision.Update();
    ++trainer.global_step_;
    for (size_t i = 0; i < trainer.optimizers_.schedulers.size(); ++i) {
      const SchedulerConfig& scheduler = trainer.optimizers_.schedulers[i];
      if (scheduler.interval == SchedulerConfig::Interval::kStep && !IsMetricScheduler(scheduler) &&
          trainer.global_step_ % scheduler.frequency == 0) {
        scheduler.scheduler->step();
        ++trainer.scheduler_steps_[i];
        ++trainer.scheduler_steps_in_epoch_;
      }
    }
  });
}

absl::Status AutomaticOptimization::StepScheduler(size_t index) {
  const SchedulerConfig& config = trainer_.optimizers_.schedulers[index];
  auto* metric_scheduler = dynamic_cast<MetricScheduler*>(config.scheduler.get());
  if (metric_scheduler == nullptr) {
    return CallUser("lr scheduler step", [&] {
      config.scheduler->step();
      ++trainer_.scheduler_steps_[index];
      ++trainer_.scheduler_steps_in_epoch_;
    });
  }
  const MetricMap& metrics = trainer_.callback_metrics();
  auto found = metrics.find(config.monitor);
  if (found == metrics.end()) {
    const std::string message = absl::StrCat(
        "ReduceLROnPlateau conditioned on metric '", config.monitor, "', which is not available at epoch ",
        trainer_.current_epoch_, ", global step ", trainer_.global_step_, ". Available metrics are: ",
        MetricNames(metrics), ". Set the SchedulerConfig's monitor to one of them, or validate before the scheduler "
        "steps");
    if (config.strict) return absl::InvalidArgumentError(message);
    LOG(WARNING) << message << " (strict=false: skipping this learning-rate update)";
    return absl::OkStatus();
  }
  return CallUser("lr scheduler step", [&] {
    metric_scheduler->step(found->second);
    ++trainer_.scheduler_steps_[index];
    ++trainer_.scheduler_steps_in_epoch_;
  });
}

}  // namespace kiln
