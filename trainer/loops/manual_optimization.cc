#include "trainer/loops/manual_optimization.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"
#include "glog/logging.h"
#include "trainer/core/metric_scheduler.h"
#include "trainer/loops/automatic_optimization.h"
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
  return trainer_.optimizers_.optimizers;
}

std::vector<at::Tensor> ManualOptimization::optimizer_parameters(size_t index) const {
  return trainer_.optimizer_parameters_.at(index);
}

size_t ManualOptimization::num_schedulers() const { return trainer_.optimizers_.schedulers.size(); }

void ManualOptimization::Backward(const at::Tensor& loss) {
  TORCH_CHECK_VALUE(loss.defined() && loss.numel() == 1, "manual_backward needs a scalar loss tensor");
  if (skipped_) return;  // A non-finite loss skipped this batch: nothing more of it is trained on.
  Trainer& trainer = trainer_;
  Strategy& strategy = *trainer.strategy_;
  // Never train on a non-finite loss: every rank decides together (each calls manual_backward as often).
  const double value = loss.detach().item<double>();
  bool nonfinite = !std::isfinite(value);
  if (strategy.world_size() > 1) nonfinite = strategy.ReduceAny(nonfinite);
  if (nonfinite) {
    const std::string shown = std::isfinite(value) ? "not finite on another rank" : absl::StrCat(value);
    if (trainer.options_.on_nonfinite_loss == "stop") {
      failure_ = NonFiniteLossError(shown, trainer.current_epoch_, batch_idx_, trainer.global_step_);
      TORCH_CHECK(false, failure_.message());
    }
    LOG(WARNING) << "skipping epoch " << trainer.current_epoch_ << " batch " << batch_idx_
                 << ": a loss given to manual_backward is " << shown << " (on_nonfinite_loss=\"skip\")";
    skipped_ = true;
    for (const auto& optimizer : trainer.optimizers_.optimizers) ZeroGradToNone(*optimizer);
    return;
  }
  LightningModule& model = *model_;
  const at::Tensor to_backward = trainer.precision_->PreBackward(loss);
  trainer.CallCallbacks([&](Callback& c) { c.on_before_backward(trainer, model, to_backward); });
  model.on_before_backward(to_backward);
  strategy.Backward(to_backward, sync_gradients_);
  trainer.CallCallbacks([&](Callback& c) { c.on_after_backward(trainer, model); });
  model.on_after_backward();
}

void ManualOptimization::UnscaleGradients(size_t index) {
  if (skipped_ || !unscaled_.insert(index).second) return;
  trainer_.precision_->UnscaleGradients(*trainer_.optimizers_.optimizers.at(index));
}

void ManualOptimization::Step(size_t index) {
  Trainer& trainer = trainer_;
  torch::optim::Optimizer& optimizer = *trainer.optimizers_.optimizers.at(index);
  if (skipped_) {
    ZeroGradToNone(optimizer);
    return;
  }
  LightningModule& model = *model_;
  PrecisionPlugin& precision = *trainer.precision_;
  // on_before_optimizer_step sees true gradients: 16-mixed unscales them first (unless clip_gradients did).
  UnscaleGradients(index);
  trainer.CallCallbacks([&](Callback& c) { c.on_before_optimizer_step(trainer, model, optimizer); });
  model.on_before_optimizer_step(optimizer);
  precision.OptimizerStep(optimizer, [&] { trainer.strategy_->OptimizerStep(optimizer); });
  precision.Update();
  unscaled_.erase(index);
  ++trainer.global_step_;
  ++steps_;
}

void ManualOptimization::StepScheduler(size_t index, std::optional<double> metric) {
  Trainer& trainer = trainer_;
  TORCH_CHECK_VALUE(index < trainer.optimizers_.schedulers.size(), "lr_schedulers()[", index,
                    "]: configure_optimizers returned ", trainer.optimizers_.schedulers.size(), " scheduler(s)");
  const SchedulerConfig& config = trainer.optimizers_.schedulers[index];
  auto* metric_scheduler = dynamic_cast<MetricScheduler*>(config.scheduler.get());
  if (metric_scheduler != nullptr) {
    TORCH_CHECK_VALUE(metric.has_value(), "lr_schedulers()[", index, "] is a ReduceLROnPlateau-style scheduler: ",
                      "step it with the value it monitors, step(value)");
    metric_scheduler->step(*metric);
  } else {
    TORCH_CHECK_VALUE(!metric.has_value(), "lr_schedulers()[", index, "] monitors nothing: step it with step()");
    config.scheduler->step();
  }
  ++trainer.scheduler_steps_[index];
  ++trainer.scheduler_steps_in_epoch_;
}

}  // namespace kiln
