// Schedulers from LRSchedulerOptions (lr_scheduler_options.h).
#include "trainer/optim/lr_scheduler_options.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "c10/util/Exception.h"
#include "torch/optim/sgd.h"
#include "trainer/core/metric_scheduler.h"
#include "trainer/optim/cosine_annealing_lr.h"
#include "trainer/optim/linear_lr.h"
#include "trainer/optim/sequential_lr.h"
#include "trainer/optim/step_lr.h"

namespace kiln {
namespace {

int64_t RunLength(int64_t given, int64_t run_length, const char* setting) {
  if (given > 0) return given;
  TORCH_CHECK(run_length > 0, "the learning-rate schedule needs ", setting,
              " but the run's length is not known (no max_epochs or max_steps); set ", setting);
  return run_length;
}

std::vector<SchedulerConfig> BuildLRSchedulers(torch::optim::Optimizer& optimizer, const LRSchedulerOptions& options,
                                               int64_t run_length) {
  TORCH_CHECK(options.name == "none" || options.name == "step" || options.name == "cosine" ||
                  options.name == "plateau" || options.name == "onecycle",
              "unknown learning-rate scheduler '", options.name, "'; known: none, step, cosine, plateau, onecycle");
  TORCH_CHECK(options.warmup_iters >= 0, "warmup_iters must be >= 0, got ", options.warmup_iters);
  TORCH_CHECK(options.warmup_iters == 0 || options.name != "onecycle",
              "OneCycleLR warms up by itself (pct_start); leave warmup_iters at 0 with it");
  const bool warmup = options.warmup_iters > 0;
  const auto config = [&](std::shared_ptr<torch::optim::LRScheduler> scheduler) {
    SchedulerConfig result{std::move(scheduler), options.interval, options.frequency};
    return result;
  };
  // The warm-up is built first: it captures the optimizer's rate before anything changes it.
  std::shared_ptr<LinearLR> linear;
  if (warmup) linear = std::make_shared<LinearLR>(optimizer, options.warmup_start_factor, 1.0, options.warmup_iters);
  std::shared_ptr<LRScheduler> main;
  if (options.name == "step") {
    main = std::make_shared<StepLR>(optimizer, options.step_size, options.gamma);
  } else if (options.name == "cosine") {
    int64_t t_max = options.T_max;
    if (t_max <= 0) {
      t_max = RunLength(0, run_length, "T_max") - options.warmup_iters;
      TORCH_CHECK(t_max >= 1, "the warm-up (", options.warmup_iters, ") is as long as the run (", run_length,
                  "): no steps are left for the cosine; shorten the warm-up or set T_max");
    }
    main = std::make_shared<CosineAnnealingLR>(optimizer, t_max, options.eta_min);
  } else if (options.name == "onecycle") {
    OneCycleLROptions one_cycle = options.one_cycle;
    if (one_cycle.max_lr <= 0) one_cycle.max_lr = optimizer.param_groups().at(0).options().get_lr();
    one_cycle.total_steps = RunLength(one_cycle.total_steps, run_length, "total_steps");
    main = std::make_shared<OneCycleLR>(optimizer, one_cycle);
  }
  std::vector<SchedulerConfig> configs;
  if (options.name == "plateau") {
    // A plateau scheduler multiplies whatever rate it finds, and the warm-up's steps multiply too (LinearLR's
    // recursive form), so the two run side by side, each stepped on its own.
    if (warmup) configs.push_back(config(linear));
    auto plateau = std::make_shared<ReduceLROnPlateau>(optimizer, options.plateau);
    SchedulerConfig stepped = config(plateau);
    stepped.monitor = options.monitor;
    configs.push_back(stepped);
    return configs;
  }
  if (main == nullptr) {
    if (warmup) configs.push_back(config(linear));
    return configs;
  }
  if (!warmup) {
    configs.push_back(config(main));
    return configs;
  }
  std::vector<std::shared_ptr<LRScheduler>> chain = {linear, main};
  configs.push_back(
      config(std::make_shared<SequentialLR>(optimizer, chain, std::vector<int64_t>{options.warmup_iters})));
  return configs;
}

// How many times the schedule is stepped over the run: the run's length in intervals over the frequency, or, when
// the run's length is not known, the length the schedule names itself (its warm-up, T_max, total_steps).
int64_t SimulatedSteps(const LRSchedulerOptions& options, int64_t run_length) {
  const int64_t frequency = std::max<int64_t>(1, options.frequency);
  if (run_length > 0) return (run_length + frequency - 1) / frequency;
  int64_t steps = options.warmup_iters;
  if (options.name == "cosine") steps += options.T_max;
  if (options.name == "onecycle") steps += options.one_cycle.total_steps;
  return steps;
}

// The same schedulers over a scratch optimizer with the same rates, stepped as the run will step them (a plateau
// scheduler, which steps on a metric, is left alone): every rate must be a finite number >= 0 that float32 holds.
void CheckScheduleOverRun(torch::optim::Optimizer& optimizer, const LRSchedulerOptions& options, int64_t run_length) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const auto& group : optimizer.param_groups()) {
    groups.emplace_back(std::vector<at::Tensor>{at::zeros({1})},
                        std::make_unique<torch::optim::SGDOptions>(group.options().get_lr()));
  }
  if (groups.empty()) return;
  torch::optim::SGD scratch(groups, torch::optim::SGDOptions(groups[0].options().get_lr()));
  const bool epochs_known = options.interval == SchedulerConfig::Interval::kEpoch && options.run_epochs > 0;
  const int64_t length = run_length <= 0 && epochs_known ? options.run_epochs : run_length;
  const int64_t steps = std::min(SimulatedSteps(options, length), kMaxSimulatedScheduleSteps);
  const char* unit = options.interval == SchedulerConfig::Interval::kStep ? "step" : "epoch";
  const auto check_rates = [&](int64_t step) {
    for (const auto& group : scratch.param_groups()) {
      const double lr = group.options().get_lr();
      TORCH_CHECK_VALUE(std::isfinite(lr) && lr >= 0 && lr <= std::numeric_limits<float>::max(), "the '",
                        options.name, "' learning-rate schedule", options.warmup_iters > 0 ? " with its warm-up" : "",
                        " gives a rate of ", lr, " at ", unit, " ", step, " of the ", steps,
                        " it steps over the run (rates must be finite, >= 0 and within float32's range); check ",
                        "its settings");
    }
  };
  std::vector<SchedulerConfig> configs;
  try {
    configs = BuildLRSchedulers(scratch, options, run_length);
    check_rates(0);
    for (int64_t step = 1; step <= steps; ++step) {
      for (SchedulerConfig& config : configs) {
        if (dynamic_cast<MetricScheduler*>(config.scheduler.get()) == nullptr) config.scheduler->step();
      }
      check_rates(step);
    }
  } catch (const c10::ValueError&) {
    throw;
  } catch (const c10::Error& error) {
    // A setting out of range, or a schedule shorter than the run (OneCycleLR stepped past total_steps).
    TORCH_CHECK_VALUE(false, error.what_without_backtrace());
  }
}

}  // namespace

std::vector<SchedulerConfig> MakeLRSchedulers(torch::optim::Optimizer& optimizer, const LRSchedulerOptions& options,
                                              int64_t run_length) {
  CheckScheduleOverRun(optimizer, options, run_length);
  return BuildLRSchedulers(optimizer, options, run_length);
}

}  // namespace kiln
