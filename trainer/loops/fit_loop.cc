#include "trainer/loops/fit_loop.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
#include "absl/strings/str_cat.h"
#include "c10/core/InferenceMode.h"
#include "glog/logging.h"
#include "trainer/checkpoint/lightning/checkpoint_connector.h"
#include "trainer/core/option_fix.h"
#include "trainer/loops/automatic_optimization.h"
#include "trainer/loops/call_user.h"
#include "trainer/loops/evaluation_loop.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/preflight.h"
#include "trainer/loops/rank_agreement.h"
#include "trainer/optim/lr_scheduler.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/trainer.h"

namespace kiln {

FitLoop::FitLoop(LoopContext& context) : context_(context), epoch_loop_(context, epoch_progress_) {}

void FitLoop::Reset() {
  epoch_progress_ = EpochProgress();
  epoch_loop_.Reset(context_.optimizers.schedulers.size());
  should_stop_ = false;
  context_.callback_metrics.clear();
  context_.resumed_from.clear();
}

LoopProgress FitLoop::state_dict() const {
  LoopProgress progress{.epoch = epoch_progress_.resume, .current_epoch = epoch_progress_.current};
  epoch_loop_.AddToStateDict(progress);
  return progress;
}

void FitLoop::load_state_dict(const LoopProgress& progress, const std::vector<int64_t>& scheduler_steps) {
  epoch_progress_.resume = progress.epoch;
  epoch_progress_.current = progress.epoch;
  epoch_loop_.load_state_dict(progress, scheduler_steps);
}

absl::Status FitLoop::Run(LightningModule& model, DataModule& data, const std::string& ckpt_path) {
  Trainer& trainer = context_.trainer;
  if (absl::Status status = SetupData(model, data); !status.ok()) return status;
  std::vector<int64_t> val_batches;
  for (const auto& loader : val_loaders_) val_batches.push_back(loader->num_batches());
  absl::StatusOr<TrainingLimits> limits = ResolveLimits(trainer.options(), train_loader_->num_batches(), val_batches);
  if (!limits.ok()) return limits.status();
  limits_ = *limits;
  num_training_batches_ = limits_.train_batches;
  max_epochs_ = trainer.options().max_epochs.value_or(-1);
  if (!trainer.options().max_epochs.has_value() && trainer.options().max_steps == -1) {
    LOG(WARNING) << "`max_epochs` was not set. Setting it to " << kDefaultMaxEpochs
                 << " epochs. To train without an epoch limit, set `max_epochs=-1`.";
    max_epochs_ = kDefaultMaxEpochs;
  }
  if (absl::Status status = ConfigureOptimizers(model); !status.ok()) return status;
  if (absl::Status status = Restart(model, data, ckpt_path); !status.ok()) return status;
  for (const auto& optimizer : context_.optimizers.optimizers) ZeroGradToNone(*optimizer);
  if (absl::Status status = Preflight(model); !status.ok()) return status;
  // After every input check, so that a run refused for its input leaves no folder behind.
  if (absl::Status claimed = context_.setup_loggers(); !claimed.ok()) return claimed;
  if (absl::Status status = Start(model); !status.ok()) return status;
  if (absl::Status status = SanityCheck(model); !status.ok()) return status;

  epoch_progress_.current = epoch_progress_.resume;
  absl::Status status = CallUser("on_train_start", [&] {
    context_.CallCallbacks([&](Callback& c) { c.on_train_start(trainer, model); });
    model.on_train_start();
  });
  if (!status.ok()) return status;
  while (!Done()) {
    status = epoch_loop_.Run(model, limits_, *train_loader_, LoaderPointers(val_loaders_));
    if (!status.ok()) return status;
    ++epoch_progress_.current;
  }
  return End(model);
}

absl::Status FitLoop::SetupData(LightningModule& model, DataModule& data) {
  // Lightning's order: the data's setup, the callbacks', the module's, then (below) the loaders, and
  // configure_optimizers after all of them, so that a module may build its layers in setup.
  absl::Status status = CallUser("setup", [&] {
    context_.CallSetupHooks(data, model, Stage::kFit);
    train_loader_ = data.train_dataloader();
    val_loaders_ = data.val_dataloaders();
  });
  if (!status.ok()) return status;
  if (train_loader_ == nullptr) {
    return absl::InvalidArgumentError("the data module returned no train_dataloader; fit needs training data");
  }
  for (size_t i = 0; i < val_loaders_.size(); ++i) {
    if (val_loaders_[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("the data module's val_dataloaders() gave a null loader at index ",
                                                     i, " of ", val_loaders_.size(),
                                                     "; return only loaders that exist"));
    }
  }
  std::vector<DataLoader*> loaders = LoaderPointers(val_loaders_);
  loaders.insert(loaders.begin(), train_loader_.get());
  return ShardLoaders(*context_.trainer.strategy(), loaders);
}

absl::StatusOr<TrainingLimits> FitLoop::ResolveLimits(const TrainerOptions& options, int64_t train_batches,
                                                      int64_t val_batches) {
  return ResolveLimits(options, train_batches,
                       val_batches >= 0 ? std::vector<int64_t>{val_batches} : std::vector<int64_t>{});
}

absl::StatusOr<TrainingLimits> FitLoop::ResolveLimits(const TrainerOptions& options, int64_t train_batches,
                                                      const std::vector<int64_t>& val_batches) {
  TrainingLimits limits;
  const bool stream = train_batches == DataLoader::kUnknownLength;
  if (stream) {
    // A stream's length is found when it ends: limits and intervals can count batches, not fractions of it.
    for (const auto& [name, limit] : {std::pair<const char*, const BatchLimit*>{"limit_train_batches",
                                                                                 &options.limit_train_batches},
                                      {"val_check_interval", &options.val_check_interval}}) {
      if (limit->is_fraction() && !limit->is_whole()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "`", name, "` is ", limit->ToString(), ", a fraction of an epoch, but the training loader is a stream of "
            "unknown length: set it to 1.0 (the whole stream) or to a number of batches (an int)"));
      }
    }
  }
  absl::StatusOr<int64_t> train =
      stream && options.limit_train_batches.is_whole()
          ? absl::StatusOr<int64_t>(INT64_MAX)
          : options.limit_train_batches.Resolve(stream ? INT64_MAX : train_batches, "limit_train_batches");
  if (!train.ok()) return train.status();
  limits.train_batches = *train;
  for (int64_t batches : val_batches) {
    absl::StatusOr<int64_t> val = options.limit_val_batches.Resolve(batches, "limit_val_batches");
    if (!val.ok()) return val.status();
    limits.val_batches_per_loader.push_back(*val);
    limits.val_batches += *val;
  }
  if (stream && options.val_check_interval.is_fraction()) {
    limits.val_check_batch = INT64_MAX;  // Validation at the stream's end only.
    limits.val_at_epoch_end = true;
    return limits;
  }
  if (options.val_check_interval.is_fraction()) {
    absl::StatusOr<int64_t> every = options.val_check_interval.Resolve(limits.train_batches, "val_check_interval");
    if (!every.ok()) return every.status();
    limits.val_check_batch = std::max<int64_t>(1, *every);
    limits.val_at_epoch_end = true;
    return limits;
  }
  absl::StatusOr<int64_t> every = options.val_check_interval.Resolve(INT64_MAX, "val_check_interval");
  if (!every.ok()) return every.status();
  if (!stream && limits.val_batches > 0 && *every > limits.train_batches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "`val_check_interval` (", *every, ") must be less than or equal to the number of the training batches (",
        limits.train_batches, "). If you want to disable validation set `limit_val_batches` to 0.0 instead."));
  }
  limits.val_check_batch = *every;
  limits.val_at_epoch_end = false;
  return limits;
}

absl::Status FitLoop::ConfigureOptimizers(LightningModule& model) {
  Trainer& trainer = context_.trainer;
  const TrainerOptions& options = trainer.options();
  // A stream without a batch limit has no known length: only max_steps bounds the run.
  const bool unbounded = limits_.train_batches == INT64_MAX;
  int64_t steps = -1;
  if (max_epochs_ >= 0 && !unbounded) steps = OptimizerStepsPerEpoch() * std::max<int64_t>(1, max_epochs_);
  if (options.max_steps >= 0) steps = steps < 0 ? options.max_steps : std::min(steps, options.max_steps);
  model.set_estimated_stepping_batches(steps);
  absl::Status status = CallUser("configure_optimizers", [&] { context_.optimizers = model.configure_optimizers(); });
  if (!status.ok()) return status;
  if (context_.optimizers.optimizers.empty()) {
    return absl::InvalidArgumentError("configure_optimizers returned no optimizer; return at least one");
  }
  // Lightning 2.x's refusal (before anything is written: the loggers have not claimed a folder yet).
  if (model.automatic_optimization() && context_.optimizers.optimizers.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "configure_optimizers returned ", context_.optimizers.optimizers.size(), " optimizers, but training with "
        "several optimizers is only supported with manual optimization. Call set_automatic_optimization(false) in "
        "the module's constructor (Lightning's self.automatic_optimization = False), then step each optimizer in "
        "training_step: auto opts = optimizers(); manual_backward(loss); opts[0].step(); ..."));
  }
  // What each optimizer steps of the module, before a strategy that shards the parameters points the optimizers at
  // its shards (before any state is restored): toggle_optimizer relates them to the module's parameters.
  context_.optimizer_parameters.clear();
  for (const auto& optimizer : context_.optimizers.optimizers) {
    std::vector<at::Tensor>& parameters = context_.optimizer_parameters.emplace_back();
    for (const auto& group : optimizer->param_groups()) {
      parameters.insert(parameters.end(), group.params().begin(), group.params().end());
    }
  }
  if (absl::Status connected = trainer.strategy()->ConnectOptimizers(context_.optimizers.optimizers);
      !connected.ok()) {
    return connected;
  }
  for (const SchedulerConfig& scheduler : context_.optimizers.schedulers) {
    if (scheduler.scheduler == nullptr || scheduler.frequency < 1) {
      return absl::InvalidArgumentError(
          "configure_optimizers returned a scheduler config without a scheduler or with frequency < 1");
    }
    if (IsMetricScheduler(scheduler) && scheduler.monitor.empty()) {
      return absl::InvalidArgumentError(
          "configure_optimizers returned a ReduceLROnPlateau-style scheduler (a MetricScheduler) without a monitor; "
          "set its SchedulerConfig's monitor to a logged metric, e.g. monitor = \"val_loss\"");
    }
  }
  if (!model.automatic_optimization()) {
    // Lightning's refusals, with its fixes: under manual optimization the step accumulates and clips.
    if (options.accumulate_grad_batches > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "accumulate_grad_batches=", options.accumulate_grad_batches, ": automatic gradient accumulation is not "
          "supported for manual optimization (the module's automatic_optimization() is false). Remove "
          "accumulate_grad_batches, and step the optimizers every N batches in training_step instead"));
    }
    if (options.gradient_clip_val.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient_clip_val=", *options.gradient_clip_val, ": automatic gradient clipping is not supported for "
          "manual optimization (the module's automatic_optimization() is false). Remove gradient_clip_val, and call "
          "clip_gradients(optimizer, value, algorithm) in training_step before the optimizer's step"));
    }
  }
  return absl::OkStatus();
}

absl::Status FitLoop::Restart(LightningModule& model, DataModule& data, const std::string& ckpt_path) {
  Reset();
  if (ckpt_path.empty()) return absl::OkStatus();
  std::string path = ckpt_path;
  if (ckpt_path == "last") {
    // As Lightning's ckpt_path="last": with nothing to resume, a script that always passes it trains from scratch.
    // The file found is restored as found: finding it read and checked it once already.
    absl::StatusOr<std::string> last = context_.resolve_checkpoint_path(ckpt_path);
    if (absl::IsNotFound(last.status())) {
      LOG(WARNING) << last.status().message() << ". There is nothing to resume: training starts from scratch";
      return absl::OkStatus();
    }
    if (!last.ok()) return last.status();
    path = *std::move(last);
  }
  return context_.restore_checkpoint(model, path, /*restore_training=*/true, &data);
}

absl::Status FitLoop::Start(LightningModule& model) {
  Trainer& trainer = context_.trainer;
  absl::Status status = CallUser("on_fit_start", [&] {
    context_.CallCallbacks([&](Callback& c) { c.on_fit_start(trainer, model); });
    model.on_fit_start();
  });
  if (!status.ok()) return status;
  if (!trainer.is_global_zero() || trainer.options().fast_dev_run > 0) return absl::OkStatus();
  for (const auto& logger : trainer.options().loggers) {
    if (absl::Status logged = logger->log_hyperparams(model.hparams()); !logged.ok()) {
      LOG(WARNING) << "logger '" << logger->name() << "' failed: " << logged;
    }
  }
  return absl::OkStatus();
}

absl::Status FitLoop::Preflight(LightningModule& model) {
  Trainer& trainer = context_.trainer;
  const TrainerOptions& options = trainer.options();
  std::vector<MonitoredMetric> monitors;
  for (const auto& callback : context_.callbacks) {
    for (MonitoredMetric& monitor : callback->monitored_metrics()) monitors.push_back(std::move(monitor));
  }
  for (const SchedulerConfig& config : context_.optimizers.schedulers) {
    if (config.monitor.empty()) continue;
    const bool every_step = config.interval == SchedulerConfig::Interval::kStep;
    monitors.push_back({.name = config.monitor,
                        .option = absl::StrCat("the learning-rate scheduler's monitor '", config.monitor,
                                               "' (interval='", every_step ? "step" : "epoch", "')"),
                        .every_n_train_steps = every_step ? config.frequency : 0,
                        .strict = config.strict});
  }
  PreflightPlan plan;
  PlanRunLength(model, plan);
  std::vector<ScheduledMilestone> milestones;
  // Under manual optimization training_step steps the schedules, as often as it likes.
  for (const SchedulerConfig& config : model.automatic_optimization() ? context_.optimizers.schedulers
                                                                      : std::vector<SchedulerConfig>{}) {
    const auto* schedule = dynamic_cast<const LRScheduler*>(config.scheduler.get());
    if (schedule == nullptr) continue;  // LibTorch's own schedulers say nothing of their milestones.
    for (LRScheduler::Milestone& milestone : schedule->milestones()) {
      milestones.push_back({.setting = std::move(milestone.setting),
                            .step = milestone.step,
                            .per_step = config.interval == SchedulerConfig::Interval::kStep,
                            .frequency = config.frequency});
    }
  }
  if (absl::Status status = CheckMilestones(plan, milestones); !status.ok()) return status;
  if (monitors.empty()) return absl::OkStatus();

  for (std::string& name : model.logged_metric_names()) plan.declared_metrics.insert(std::move(name));
  if (val_loaders_.empty()) {
    plan.validation_never_runs = "there is no validation data (the data module gives no val_dataloaders): give some";
  } else if (limits_.val_batches == 0) {
    plan.validation_never_runs = absl::StrCat(OptionFix("limit_val_batches", "--limit_val_batches"), " is ",
                                              options.limit_val_batches.ToString(), ": set it above 0");
  } else if (max_epochs_ >= 0 && options.check_val_every_n_epoch > max_epochs_) {
    plan.validation_never_runs =
        absl::StrCat(OptionFix("check_val_every_n_epoch", "--check_val_every_n_epoch"), " is ",
                     options.check_val_every_n_epoch, ", beyond max_epochs=", max_epochs_,
                     ": set it to at most ", max_epochs_);
  }
  const int64_t train_batches = limits_.train_batches;
  if (plan.validation_never_runs.empty() && epoch_loop_.global_step() == 0 && train_batches > 0 &&
      train_batches != INT64_MAX) {
    // Validation first runs in epoch check_val_every_n_epoch - 1, after val_check_batch batches (or at its end).
    const int64_t within = limits_.val_check_batch > 0 ? std::min(limits_.val_check_batch, train_batches)
                                                        : train_batches;
    const int64_t batches = (options.check_val_every_n_epoch - 1) * train_batches + within;
    plan.first_validation_step = batches / std::max<int64_t>(1, options.accumulate_grad_batches);
  }
  // The dry step runs only where a check can fail: when no validation runs (limit_val_batches=0 included: the one
  // step finds the mistake the limit would hide), or a monitor is read at steps before validation first logs. A run
  // that validates and reads its monitors after validation calls validation_step no more than Lightning does.
  const bool read_early = std::any_of(monitors.begin(), monitors.end(), [&](const MonitoredMetric& monitor) {
    return ReadBeforeValidation(plan, monitor);
  });
  if (!val_loaders_.empty() && (!plan.validation_never_runs.empty() || read_early)) {
    absl::StatusOr<std::set<std::string>> logged = DryValidationMetrics(model);
    if (!logged.ok()) return logged.status();
    plan.validation_metrics = *std::move(logged);
    plan.dry_step_ran = true;
  }
  return CheckMonitors(plan, monitors);
}

int64_t FitLoop::OptimizerStepsPerEpoch() const {
  if (limits_.train_batches == INT64_MAX) return 0;
  const int64_t accumulate = std::max<int64_t>(1, context_.trainer.options().accumulate_grad_batches);
  return (limits_.train_batches + accumulate - 1) / accumulate;
}

void FitLoop::PlanRunLength(const LightningModule& model, PreflightPlan& plan) const {
  const TrainerOptions& options = context_.trainer.options();
  const int64_t max_steps = options.max_steps;
  const int64_t max_epochs = max_epochs_;
  plan.run_steps = model.estimated_stepping_batches();
  const int64_t per_epoch = OptimizerStepsPerEpoch();
  const std::string per_epoch_text = absl::StrCat(per_epoch, " optimizer step(s) per epoch");
  plan.run_steps_bound = max_steps >= 0 && plan.run_steps == max_steps
                             ? absl::StrCat("max_steps=", max_steps)
                             : absl::StrCat("max_epochs=", max_epochs, " of ", per_epoch_text);
  if (max_epochs >= 0) {
    plan.run_epochs = max_epochs;
    plan.run_epochs_bound = absl::StrCat("max_epochs=", max_epochs);
  }
  if (max_steps >= 0 && per_epoch > 0) {
    const int64_t by_steps = (max_steps + per_epoch - 1) / per_epoch;
    if (plan.run_epochs < 0 || by_steps < plan.run_epochs) {
      plan.run_epochs = by_steps;
      plan.run_epochs_bound = absl::StrCat("max_steps=", max_steps, " at ", per_epoch_text);
    }
  }
}

absl::StatusOr<std::set<std::string>> FitLoop::DryValidationMetrics(LightningModule& model) {
  Trainer& trainer = context_.trainer;
  std::set<std::string> names;
  const at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  const bool was_training = model.is_training();
  model.eval();
  absl::Status status = CallUser("validation_step (fit's check of its monitors, before the run starts)", [&] {
    c10::InferenceMode no_grad;
    for (size_t i = 0; i < val_loaders_.size(); ++i) {
      DataLoader& loader = *val_loaders_[i];
      if (loader.num_batches() <= 0) continue;  // Empty, or a stream (its first batch is the run's).
      Batch batch = EvaluationLoop::TransferBatch(trainer, model, loader.get_batch(0), static_cast<int64_t>(i));
      MetricCollector collector(/*training=*/false);
      model.set_metric_sink(&collector, batch.size());
      {
        PrecisionPlugin::ForwardContext forward_context(*trainer.precision_plugin());
        model.validation_step(batch, 0, static_cast<int64_t>(i));
      }
      model.set_metric_sink(nullptr, 0);
      const std::string suffix = val_loaders_.size() > 1 ? absl::StrCat("/dataloader_idx_", i) : "";
      for (const MetricMap& logged : {collector.StepMetrics(), collector.EpochMetrics()}) {
        for (const auto& [name, value] : logged) names.insert(name + suffix);
      }
    }
  });
  model.set_metric_sink(nullptr, 0);
  if (was_training) model.train();
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(rng);
  if (!status.ok()) return status;
  return names;
}

absl::Status FitLoop::SanityCheck(LightningModule& model) {
  Trainer& trainer = context_.trainer;
  // num_sanity_val_steps of each validation loader, as Lightning runs them.
  const int64_t requested = trainer.options().num_sanity_val_steps;
  std::vector<int64_t> steps;
  int64_t total = 0;
  for (int64_t limit : limits_.val_batches_per_loader) {
    steps.push_back(requested < 0 ? limit : std::min(requested, limit));
    total += steps.back();
  }
  if (val_loaders_.empty() || total <= 0) return absl::OkStatus();
  const at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  sanity_checking_ = true;
  absl::Status status = CallUser("on_sanity_check_start", [&] {
    context_.CallCallbacks([&](Callback& c) { c.on_sanity_check_start(trainer, model); });
  });
  absl::StatusOr<MetricMap> sanity =
      status.ok() ? EvaluationLoop(context_, Stage::kValidate).Run(model, LoaderPointers(val_loaders_), steps) : status;
  if (sanity.ok()) {
    status = CallUser("on_sanity_check_end", [&] {
      context_.CallCallbacks([&](Callback& c) { c.on_sanity_check_end(trainer, model); });
    });
    if (!status.ok()) sanity = status;
  }
  sanity_checking_ = false;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(rng);
  return sanity.status();
}

bool FitLoop::Done() {
  Trainer& trainer = context_.trainer;
  const TrainerOptions& options = trainer.options();
  const bool min_epochs_met = !options.min_epochs.has_value() || epoch_progress_.current >= *options.min_epochs;
  if (should_stop_ && !min_epochs_met) {
    LOG(INFO) << "Trainer was signaled to stop but the required `min_epochs=" << *options.min_epochs
              << "` has not been met. Training will continue...";
    should_stop_ = false;
  }
  return (options.max_steps >= 0 && epoch_loop_.global_step() >= options.max_steps) ||
         (max_epochs_ >= 0 && epoch_progress_.current >= max_epochs_) ||
         (should_stop_ && min_epochs_met);
}

absl::Status FitLoop::End(LightningModule& model) {
  Trainer& trainer = context_.trainer;
  absl::Status status = CallUser("on_train_end", [&] {
    context_.CallCallbacks([&](Callback& c) { c.on_train_end(trainer, model); });
    model.on_train_end();
  });
  if (!status.ok()) return status;
  return CallUser("on_fit_end", [&] {
    context_.CallCallbacks([&](Callback& c) { c.on_fit_end(trainer, model); });
    model.on_fit_end();
    context_.CallTeardownHooks(model, Stage::kFit);
  });
}

}  // namespace kiln
