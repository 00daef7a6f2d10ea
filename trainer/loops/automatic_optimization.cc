#include "trainer/loops/automatic_optimization.h"

#include <optional>
#include <string>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "trainer/callbacks/monitor.h"
#include "trainer/core/metric_scheduler.h"
#include "trainer/loops/call_user.h"
#include "trainer/loops/loop_context.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {

bool IsMetricScheduler(const SchedulerConfig& config) {
  return dynamic_cast<const MetricScheduler*>(config.scheduler.get()) != nullptr;
}

void AutomaticOptimization::ZeroGrad(LightningModule& model) {
  Trainer& trainer = context_.trainer;
  for (const auto& optimizer : context_.optimizers.optimizers) {
    context_.CallCallbacks("on_before_zero_grad",
                           [&](Callback& c) { c.on_before_zero_grad(trainer, model, *optimizer); });
    context_.CallModuleHook("on_before_zero_grad", model, [&] { model.on_before_zero_grad(*optimizer); });
    ZeroGradToNone(*optimizer);
  }
}

absl::Status AutomaticOptimization::Step(LightningModule& model) {
  Trainer& trainer = context_.trainer;
  PrecisionPlugin& precision = *trainer.precision_plugin();
  const TrainerOptions& options = trainer.options();
  const std::optional<std::string> algorithm =
      options.gradient_clip_val.has_value() ? std::optional<std::string>(options.gradient_clip_algorithm)
                                            : std::nullopt;
  return CallUser("optimizer step", [&] {
    for (const auto& optimizer : context_.optimizers.optimizers) {
      // on_before_optimizer_step and clipping see true gradients: 16-mixed unscales them first (precision_plugin.h).
      precision.UnscaleGradients(*optimizer);
      context_.CallCallbacks("on_before_optimizer_step",
                             [&](Callback& c) { c.on_before_optimizer_step(trainer, model, *optimizer); });
      context_.CallModuleHook("on_before_optimizer_step", model, [&] { model.on_before_optimizer_step(*optimizer); });
      context_.CallModuleHook("configure_gradient_clipping", model, [&] {
        model.configure_gradient_clipping(*optimizer, options.gradient_clip_val, algorithm);
      });
      context_.CallStrategyHook("optimizer_step", [&] {
        precision.OptimizerStep(*optimizer, [&] { trainer.strategy()->OptimizerStep(*optimizer); });
      });
    }
    precision.Update();
    ++optim_progress_.total;
    for (size_t i = 0; i < context_.optimizers.schedulers.size(); ++i) {
      const SchedulerConfig& scheduler = context_.optimizers.schedulers[i];
      if (scheduler.interval == SchedulerConfig::Interval::kStep && !IsMetricScheduler(scheduler) &&
          optim_progress_.total % scheduler.frequency == 0) {
        scheduler.scheduler->step();
        scheduler_progress_.Increment(i);
      }
    }
  });
}

absl::Status AutomaticOptimization::StepScheduler(size_t index) {
  const SchedulerConfig& config = context_.optimizers.schedulers[index];
  auto* metric_scheduler = dynamic_cast<MetricScheduler*>(config.scheduler.get());
  if (metric_scheduler == nullptr) {
    return CallUser("lr scheduler step", [&] {
      config.scheduler->step();
      scheduler_progress_.Increment(index);
    });
  }
  const MetricMap& metrics = context_.trainer.callback_metrics();
  auto found = metrics.find(config.monitor);
  if (found == metrics.end()) {
    const std::string message = absl::StrCat(
        "ReduceLROnPlateau conditioned on metric '", config.monitor, "', which is not available at epoch ",
        context_.trainer.current_epoch(), ", global step ", optim_progress_.total, ". Available metrics are: ",
        MetricNames(metrics), ". Set the SchedulerConfig's monitor to one of them, or validate before the scheduler "
        "steps");
    if (config.strict) return absl::InvalidArgumentError(message);
    LOG(WARNING) << message << " (strict=false: skipping this learning-rate update)";
    return absl::OkStatus();
  }
  return CallUser("lr scheduler step", [&] {
    metric_scheduler->step(found->second);
    scheduler_progress_.Increment(index);
  });
}

}  // namespace kiln
