#include "trainer/loops/automatic_optimization.h"

#include <optional>
#include <string>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "trainer/callbacks/monitor.h"
#include "trainer/core/metric_scheduler.h"
#include "trainer/loops/call_user.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {

bool IsMetricScheduler(const SchedulerConfig& config) {
  return dynamic_cast<const MetricScheduler*>(config.scheduler.get()) != nullptr;
}

void AutomaticOptimization::ZeroGrad(LightningModule& model) {
  Trainer& trainer = trainer_;
  for (const auto& optimizer : trainer.optimizers_.optimizers) {
    trainer.CallCallbacks([&](Callback& c) { c.on_before_zero_grad(trainer, model, *optimizer); });
    model.on_before_zero_grad(*optimizer);
    ZeroGradToNone(*optimizer);
  }
}

absl::Status AutomaticOptimization::Step(LightningModule& model) {
  Trainer& trainer = trainer_;
  PrecisionPlugin& precision = *trainer.precision_;
  const TrainerOptions& options = trainer.options_;
  const std::optional<std::string> algorithm =
      options.gradient_clip_val.has_value() ? std::optional<std::string>(options.gradient_clip_algorithm)
                                            : std::nullopt;
  return CallUser("optimizer step", [&] {
    for (const auto& optimizer : trainer.optimizers_.optimizers) {
      // on_before_optimizer_step and clipping see true gradients: 16-mixed unscales them first (precision_plugin.h).
      precision.UnscaleGradients(*optimizer);
      trainer.CallCallbacks([&](Callback& c) { c.on_before_optimizer_step(trainer, model, *optimizer); });
      model.on_before_optimizer_step(*optimizer);
      model.configure_gradient_clipping(*optimizer, options.gradient_clip_val, algorithm);
      precision.OptimizerStep(*optimizer, [&] { trainer.strategy_->OptimizerStep(*optimizer); });
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
