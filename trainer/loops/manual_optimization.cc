#include "trainer/loops/manual_optimization.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"
#include "glog/logging.h"
#include "trainer/core/metric_scheduler.h"
#include "trainer/loops/automatic_optimization.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/loss_check.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {

void ManualOptimization::StartBatch(LightningModule& model, int64_t batch_idx) {
  model_ = &model;
  batch_idx_ = batch_idx;
  steps_ = 0;
  skipped_ = false;
  sync_gradients_ = true;
  unscaled_.clear();
}

std::vector<std::shared_ptr<torch::optim::Optimizer>> ManualOptimization::optimizers() const {
  return context_.optimizers.optimizers;
}

std::vector<at::Tensor> ManualOptimization::optimizer_parameters(size_t index) const {
  return context_.optimizer_parameters.at(index);
}

size_t ManualOptimization::num_schedulers() const { return context_.optimizers.schedulers.size(); }

void ManualOptimization::Backward(const at::Tensor& loss) {
  TORCH_CHECK_VALUE(loss.defined() && loss.numel() == 1, "manual_backward needs a scalar loss tensor");
  if (skipped_) return;  // A non-finite loss skipped this batch: nothing more of it is trained on.
  Trainer& trainer = context_.trainer;
  Strategy& strategy = *trainer.strategy();
  // Never train on a non-finite loss: every rank decides together (each calls manual_backward as often).
  const double value = loss.detach().item<double>();
  bool nonfinite = !std::isfinite(value);
  if (strategy.world_size() > 1) nonfinite = strategy.ReduceAny(nonfinite);
  if (nonfinite) {
    const std::string shown = std::isfinite(value) ? "not finite on another rank" : absl::StrCat(value);
    if (trainer.options().on_nonfinite_loss == "stop") {
      failure_ = NonFiniteLossError(shown, trainer.current_epoch(), batch_idx_, optim_progress_.total);
      TORCH_CHECK(false, failure_.message());
    }
    LOG(WARNING) << "skipping epoch " << trainer.current_epoch() << " batch " << batch_idx_
                 << ": a loss given to manual_backward is " << shown << " (on_nonfinite_loss=\"skip\")";
    skipped_ = true;
    for (const auto& optimizer : context_.optimizers.optimizers) ZeroGradToNone(*optimizer);
    return;
  }
  LightningModule& model = *model_;
  const at::Tensor to_backward = trainer.precision_plugin()->PreBackward(loss);
  context_.CallCallbacks("on_before_backward", [&](Callback& c) { c.on_before_backward(trainer, model, to_backward); });
  context_.CallModuleHook("on_before_backward", model, [&] { model.on_before_backward(to_backward); });
  strategy.Backward(to_backward, sync_gradients_);
  context_.CallCallbacks("on_after_backward", [&](Callback& c) { c.on_after_backward(trainer, model); });
  context_.CallModuleHook("on_after_backward", model, [&] { model.on_after_backward(); });
}

void ManualOptimization::UnscaleGradients(size_t index) {
  if (skipped_ || !unscaled_.insert(index).second) return;
  context_.trainer.precision_plugin()->UnscaleGradients(*context_.optimizers.optimizers.at(index));
}

void ManualOptimization::Step(size_t index) {
  Trainer& trainer = context_.trainer;
  torch::optim::Optimizer& optimizer = *context_.optimizers.optimizers.at(index);
  if (skipped_) {
    ZeroGradToNone(optimizer);
    return;
  }
  LightningModule& model = *model_;
  PrecisionPlugin& precision = *trainer.precision_plugin();
  // on_before_optimizer_step sees true gradients: 16-mixed unscales them first (unless clip_gradients did).
  UnscaleGradients(index);
  context_.CallCallbacks("on_before_optimizer_step",
                         [&](Callback& c) { c.on_before_optimizer_step(trainer, model, optimizer); });
  context_.CallModuleHook("on_before_optimizer_step", model, [&] { model.on_before_optimizer_step(optimizer); });
  precision.OptimizerStep(optimizer, [&] { trainer.strategy()->OptimizerStep(optimizer); });
  precision.Update();
  unscaled_.erase(index);
  ++optim_progress_.total;
  ++steps_;
}

void ManualOptimization::StepScheduler(size_t index, std::optional<double> metric) {
  TORCH_CHECK_VALUE(index < context_.optimizers.schedulers.size(), "lr_schedulers()[", index,
                    "]: configure_optimizers returned ", context_.optimizers.schedulers.size(), " scheduler(s)");
  const SchedulerConfig& config = context_.optimizers.schedulers[index];
  auto* metric_scheduler = dynamic_cast<MetricScheduler*>(config.scheduler.get());
  if (metric_scheduler != nullptr) {
    TORCH_CHECK_VALUE(metric.has_value(), "lr_schedulers()[", index, "] is a ReduceLROnPlateau-style scheduler: ",
                      "step it with the value it monitors, step(value)");
    metric_scheduler->step(*metric);
  } else {
    TORCH_CHECK_VALUE(!metric.has_value(), "lr_schedulers()[", index, "] monitors nothing: step it with step()");
    config.scheduler->step();
  }
  scheduler_progress_.Increment(index);
}

}  // namespace kiln
