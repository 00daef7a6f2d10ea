#include "trainer/loops/training_epoch_loop.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "trainer/checkpoint/lightning/checkpoint_connector.h"
#include "trainer/core/device_skip_optimizer.h"
#include "trainer/loops/automatic_optimization.h"
#include "trainer/loops/call_user.h"
#include "trainer/loops/evaluation_loop.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/loss_check.h"
#include "trainer/loops/manual_optimization.h"
#include "trainer/loops/rank_agreement.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/progress.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

// While the epoch runs, callback_metrics() brings in its latest step metrics; when it leaves, also by an
// exception, they stay there.
class LiveMetrics {
 public:
  LiveMetrics(MetricCollector*& live, MetricMap& callback_metrics, MetricCollector& metrics)
      : live_(live), callback_metrics_(callback_metrics), metrics_(metrics) {
    live_ = &metrics_;
  }
  ~LiveMetrics() {
    Merge(callback_metrics_, metrics_.StepMetrics());
    live_ = nullptr;
  }
  LiveMetrics(const LiveMetrics&) = delete;
  LiveMetrics& operator=(const LiveMetrics&) = delete;

 private:
  MetricCollector*& live_;
  MetricMap& callback_metrics_;
  MetricCollector& metrics_;
};

// The scalar `loss` as a double, read on the host. A float or double loss in CPU memory (where ChecksLossOnDevice
// has the host read every loss) is read in place: item() costs two operator calls, some 1,200 instructions a step
// on the tiny MLP (issue #41).
double HostValue(const at::Tensor& loss) {
  if (loss.is_cpu() && loss.layout() == at::kStrided) {
    if (loss.scalar_type() == at::kFloat) return *loss.const_data_ptr<float>();
    if (loss.scalar_type() == at::kDouble) return *loss.const_data_ptr<double>();
  }
  return loss.item<double>();
}

}  // namespace

TrainingEpochLoop::TrainingEpochLoop(LoopContext& context, EpochProgress& epoch_progress)
    : context_(context),
      epoch_progress_(epoch_progress),
      loss_check_(std::make_unique<DeviceLossCheck>()),
      optimization_(context, optim_progress_, scheduler_progress_),
      val_loop_(context, Stage::kValidate) {}

TrainingEpochLoop::~TrainingEpochLoop() = default;

bool TrainingEpochLoop::ChecksLossOnDevice() const {
  const Trainer& trainer = context_.trainer;
  // A device whose kernels run on the CPU (c10's CPU device type) has computed the loss by the time training_step
  // returns: reading it waits for nothing, and costs less than the flag's two operators (callgrind, the tiny MLP:
  // about 11,800 instructions a step, issue #41). Devices that compute on their own, including a PrivateUse1 device
  // that computes on the host, keep the flag.
  if (trainer.strategy()->root_device().is_cpu()) return false;
  if (manual_ != nullptr || trainer.options().on_nonfinite_loss != "stop" || trainer.strategy()->world_size() > 1 ||
      context_.optimizers.optimizers.empty() || trainer.precision_plugin()->precision() == Precision::k16Mixed) {
    return false;
  }
  for (const auto& optimizer : context_.optimizers.optimizers) {
    const auto* skipping = dynamic_cast<const DeviceSkipOptimizer*>(optimizer.get());
    if (skipping == nullptr || !skipping->can_skip_on_device()) return false;
  }
  return true;
}

void TrainingEpochLoop::Reset(size_t schedulers) {
  batch_progress_ = BatchProgress();
  optim_progress_ = OptimizerProgress();
  scheduler_progress_ = SchedulerProgress();
  scheduler_progress_.total.assign(schedulers, 0);
  val_loop_.load_state_dict(EvaluationProgress());
  batches_that_stepped_ = 0;
  skipped_batches_ = 0;
  skip_window_ = false;
  train_loader_state_ = c10::IValue();
  restored_loader_state_ = c10::IValue();
}

void TrainingEpochLoop::AddToStateDict(LoopProgress& progress) const {
  progress.batch_in_epoch = batch_progress_.resume;
  progress.global_step = optim_progress_.total;
  progress.batches_done = batch_progress_.started;
  progress.lightning = {.batches_total = batch_progress_.total_started,
                        .batches_completed = batch_progress_.completed,
                        .batches_that_stepped = batches_that_stepped_,
                        .steps_in_epoch = optim_progress_.in_epoch,
                        .scheduler_steps_in_epoch = scheduler_progress_.in_epoch,
                        .val_batches_in_epoch = val_loop_.batch_progress().in_epoch,
                        .val_batches_last_run = val_loop_.batch_progress().last_run};
  progress.train_loader = batch_progress_.resume > 0 ? train_loader_state_ : c10::IValue();
}

void TrainingEpochLoop::load_state_dict(const LoopProgress& progress, const std::vector<int64_t>& scheduler_steps) {
  batch_progress_.resume = progress.batch_in_epoch;
  optim_progress_.total = progress.global_step;
  batches_that_stepped_ = progress.global_step;
  const LightningCounters& counters = progress.lightning;
  batch_progress_.total_started = counters.batches_total;
  batch_progress_.completed = counters.batches_completed;
  optim_progress_.in_epoch = counters.steps_in_epoch;
  scheduler_progress_.total = scheduler_steps;
  scheduler_progress_.in_epoch = counters.scheduler_steps_in_epoch;
  val_loop_.load_state_dict({.in_epoch = counters.val_batches_in_epoch, .last_run = counters.val_batches_last_run});
  restored_loader_state_ = progress.train_loader;
}

absl::Status TrainingEpochLoop::CheckPendingLosses() {
  std::optional<DeviceLossCheck::Loss> failed;
  absl::Status status = loss_check_->Check(&failed);
  if (failed.has_value()) {
    // The device skipped this batch's update and every one after it: the run stands where it stood before it.
    epoch_progress_.current = failed->epoch;
    optim_progress_.total = failed->global_step;
    batches_that_stepped_ = failed->global_step;
    batch_progress_.resume = failed->batch;
    batch_progress_.started = failed->batch;
  }
  return status;
}

absl::Status TrainingEpochLoop::Run(LightningModule& model, const TrainingLimits& limits, DataLoader& train,
                                    const std::vector<DataLoader*>& val) {
  limits_ = limits;
  manual_ = model.automatic_optimization()
                ? nullptr
                : std::make_unique<ManualOptimization>(context_, optim_progress_, scheduler_progress_);
  metrics_ = std::make_unique<MetricCollector>(/*training=*/true);
  SinkGuard sink_guard(model);
  LiveMetrics live(context_.live_step_metrics, context_.callback_metrics, *metrics_);
  absl::StatusOr<int64_t> first_batch = Start(model, train, val);
  if (!first_batch.ok()) return first_batch.status();
  if (train.num_batches() == DataLoader::kUnknownLength) {
    bool ran_batches = false;
    if (absl::Status status = RunStream(model, train, val, *first_batch, &ran_batches); !status.ok()) return status;
    return End(model, ran_batches);
  }
  for (int64_t batch_idx = *first_batch; batch_idx < limits_.train_batches; ++batch_idx) {
    bool stop = false;
    absl::Status status = RunBatch(model, train, val, batch_idx, std::nullopt,
                                   /*last_batch=*/batch_idx + 1 == limits_.train_batches, &stop);
    if (!status.ok()) return status;
    if (stop) break;
  }
  return End(model, /*ran_batches=*/*first_batch < limits_.train_batches);
}

absl::Status TrainingEpochLoop::FetchNext(DataLoader& train, std::optional<Batch>* next) {
  Strategy& strategy = *context_.trainer.strategy();
  return CallUser("train_dataloader's next_batch", [&] {
    *next =
        context_.ProfileLoopAction("[_TrainingEpochLoop].train_dataloader_next", [&] { return train.next_batch(); });
    // Every rank ends the epoch at the same batch: as soon as any rank's share ends (data_loader.h).
    if (strategy.world_size() > 1 && strategy.ReduceAny(!next->has_value())) next->reset();
  });
}

absl::Status TrainingEpochLoop::RunStream(LightningModule& model, DataLoader& train,
                                          const std::vector<DataLoader*>& val, int64_t first_batch,
                                          bool* ran_batches) {
  // One batch is read ahead, so that the last one is known when it runs (it ends the accumulation window and is
  // followed by the epoch's validation), as Lightning's data fetcher does.
  std::optional<Batch> next;
  if (first_batch < limits_.train_batches) {
    if (absl::Status fetched = FetchNext(train, &next); !fetched.ok()) return fetched;
  }
  for (int64_t batch_idx = first_batch; next.has_value(); ++batch_idx) {
    Batch current = *std::move(next);
    next.reset();
    // Where a checkpoint taken after this batch resumes: the stream's position before the batch read ahead.
    absl::Status status =
        CallUser("train_dataloader's state_dict", [&] { train_loader_state_ = train.state_dict(); });
    if (!status.ok()) return status;
    if (batch_idx + 1 < limits_.train_batches) {
      if (absl::Status fetched = FetchNext(train, &next); !fetched.ok()) return fetched;
    }
    *ran_batches = true;
    bool stop = false;
    status = RunBatch(model, train, val, batch_idx, std::move(current), /*last_batch=*/!next.has_value(), &stop);
    if (!status.ok()) return status;
    if (stop) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TrainingEpochLoop::Start(LightningModule& model, DataLoader& train,
                                                 const std::vector<DataLoader*>& val) {
  Trainer& trainer = context_.trainer;
  const int64_t first_batch = epoch_progress_.resume == epoch_progress_.current ? batch_progress_.resume : 0;
  epoch_progress_.resume = epoch_progress_.current;
  batch_progress_.resume = first_batch;
  batch_progress_.started = first_batch;
  if (first_batch == 0) {
    batch_progress_.completed = 0;
    optim_progress_.in_epoch = 0;
    scheduler_progress_.in_epoch = 0;
    val_loop_.StartEpoch();
  }
  validate_this_epoch_ = !val.empty() && limits_.val_batches > 0 &&
                         (epoch_progress_.current + 1) % trainer.options().check_val_every_n_epoch == 0;
  model.train();
  const bool stream = train.num_batches() == DataLoader::kUnknownLength;
  context_.progress->StartEpoch(epoch_progress_.current, trainer.max_epochs(),
                                stream && limits_.train_batches == INT64_MAX ? -1 : limits_.train_batches);
  loss_check_->Start(ChecksLossOnDevice(), context_.optimizers.optimizers);
  absl::Status status = CallUser("on_train_epoch_start", [&] {
    context_.CallCallbacks("on_train_epoch_start", [&](Callback& c) { c.on_train_epoch_start(trainer, model); });
    context_.CallModuleHook("on_train_epoch_start", model, [&] { model.on_train_epoch_start(); });
    // overfit_batches trains on the same batches, in the same order, every epoch.
    train.set_epoch(trainer.options().overfit_batches.is_zero() ? epoch_progress_.current : 0);
  });
  if (!status.ok()) return status;
  if (stream && first_batch > 0) {
    // Resuming inside the epoch: the stream goes back to where the checkpoint was taken.
    if (restored_loader_state_.isNone()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint was taken at batch ", first_batch, " of epoch ", epoch_progress_.current, ", but the "
          "training loader is a stream that keeps no position (its state_dict() returns None), so the run cannot "
          "go on from there; implement DataLoader::state_dict and load_state_dict, or resume from a checkpoint taken "
          "at an epoch's end"));
    }
    absl::Status loaded = CallUser("train_dataloader's load_state_dict", [&] {
      absl::Status restored = train.load_state_dict(restored_loader_state_);
      TORCH_CHECK_VALUE(restored.ok(), restored.message());
    });
    if (!loaded.ok()) return loaded;
    train_loader_state_ = restored_loader_state_;
  }
  restored_loader_state_ = c10::IValue();
  return first_batch;
}

absl::Status TrainingEpochLoop::TrainingStep(LightningModule& model, DataLoader& train, int64_t batch_idx,
                                             std::optional<Batch> raw, bool step_now, StepResult& result) {
  Trainer& trainer = context_.trainer;
  PrecisionPlugin& precision = *trainer.precision_plugin();
  Strategy& strategy = *trainer.strategy();
  const int64_t accumulate = trainer.options().accumulate_grad_batches;
  const bool automatic = manual_ == nullptr;
  return CallUser("training_step", [&] {
    // A stream's batch was read ahead (FetchNext, timed there); an indexed loader's is read here, straight into
    // TransferBatch's argument (no move of a named batch).
    result.batch = EvaluationLoop::TransferBatch(
        context_, model,
        raw.has_value() ? *std::move(raw)
                        : context_.ProfileLoopAction("[_TrainingEpochLoop].train_dataloader_next",
                                                     [&] { return train.get_batch(batch_idx); }),
        /*dataloader_idx=*/0);
    context_.CallCallbacks("on_train_batch_start",
                           [&](Callback& c) { c.on_train_batch_start(trainer, model, result.batch, batch_idx); });
    if (context_.CallModuleHook("on_train_batch_start", model,
                                [&] { return model.on_train_batch_start(result.batch, batch_idx); }) == -1) {
      result.skip_rest_of_epoch = true;
      return;
    }
    model.set_metric_sink(metrics_.get(), result.batch.size());
    if (!automatic) {
      manual_->StartBatch(model, batch_idx);
      model.set_manual_optimization_driver(manual_.get());
    }
    context_.CallStrategyHook("training_step", [&] {
      PrecisionPlugin::ForwardContext forward_context(precision);
      result.loss = model.training_step(result.batch, batch_idx);
    });
    model.set_manual_optimization_driver(nullptr);
    model.set_metric_sink(nullptr, 0);
    if (!automatic) {
      TORCH_CHECK(!result.loss.defined() || result.loss.numel() == 1,
                  "training_step must return a scalar loss tensor, or an undefined one under manual optimization");
      return;
    }
    TORCH_CHECK(result.loss.defined() && result.loss.numel() == 1, "training_step must return a scalar loss tensor");
    // Lightning zeroes the gradients here, between training_step and backward, on a window's first batch.
    if (batch_idx % accumulate == 0) optimization_.ZeroGrad(model);
    // Never train on a non-finite loss. Every rank decides together, so that all skip or stop at the same batch.
    if (loss_check_->on_device()) {
      loss_check_->Add(result.loss, epoch_progress_.current, batch_idx, optim_progress_.total);
    } else {
      result.loss_value = HostValue(result.loss);
      result.nonfinite = !std::isfinite(result.loss_value);
      if (strategy.world_size() > 1) result.nonfinite = strategy.ReduceAny(result.nonfinite);
      if (result.nonfinite) return;
    }
    const at::Tensor to_backward = precision.PreBackward(accumulate > 1 ? result.loss / accumulate : result.loss);
    context_.CallCallbacks("on_before_backward",
                           [&](Callback& c) { c.on_before_backward(trainer, model, to_backward); });
    context_.CallModuleHook("on_before_backward", model, [&] { model.on_before_backward(to_backward); });
    context_.CallStrategyHook("backward", [&] { strategy.Backward(to_backward, /*sync_gradients=*/step_now); });
    context_.CallCallbacks("on_after_backward", [&](Callback& c) { c.on_after_backward(trainer, model); });
    context_.CallModuleHook("on_after_backward", model, [&] { model.on_after_backward(); });
  });
}

bool TrainingEpochLoop::SkipsBatch(const StepResult& result, int64_t batch_idx, bool step_now) {
  bool skip = false;
  if (result.nonfinite) {
    LOG(WARNING) << "skipping epoch " << epoch_progress_.current << " batch " << batch_idx
                 << ": the training loss is " << result.loss_value << " (on_nonfinite_loss=\"skip\")";
    ++skipped_batches_;
    skip = true;
    skip_window_ = !step_now;
  } else if (skip_window_) {
    skip = true;
    skip_window_ = !step_now;
  }
  if (skip && step_now) {
    for (const auto& optimizer : context_.optimizers.optimizers) ZeroGradToNone(*optimizer);
  }
  return skip;
}

absl::Status TrainingEpochLoop::LogStep() {
  Trainer& trainer = context_.trainer;
  const TrainerOptions& options = trainer.options();
  // Step metrics stay tensors until something reads them: the loggers, now, or callback_metrics().
  // Values logged with sync_dist are reduced at the same steps on every rank, for rank zero to log.
  const bool log_now = options.log_every_n_steps > 0 && optim_progress_.total % options.log_every_n_steps == 0 &&
                       !options.loggers.empty();
  const bool reduce_now = log_now && trainer.strategy()->world_size() > 1 && metrics_->HasSyncedStepValues();
  if (!log_now || !(trainer.is_global_zero() || reduce_now)) return absl::OkStatus();
  // A row never holds values of a batch whose loss was not finite.
  if (absl::Status checked = CheckPendingLosses(); !checked.ok()) return checked;
  MetricMap step_metrics = metrics_->StepMetrics();
  if (reduce_now) {
    absl::Status status = CallUser("reducing sync_dist metrics", [&] {
      step_metrics = GlobalMetrics(*trainer.strategy(), *metrics_, std::move(step_metrics), /*steps=*/true);
    });
    if (!status.ok()) return status;
  }
  trainer.log_metrics(std::move(step_metrics), trainer.logged_step());
  return absl::OkStatus();
}

absl::Status TrainingEpochLoop::RunBatch(LightningModule& model, DataLoader& train,
                                         const std::vector<DataLoader*>& val, int64_t batch_idx,
                                         std::optional<Batch> raw, bool last_batch, bool* stop) {
  Trainer& trainer = context_.trainer;
  const TrainerOptions& options = trainer.options();
  const bool step_now = (batch_idx + 1) % options.accumulate_grad_batches == 0 || last_batch;
  StepResult result;
  ++batch_progress_.total_started;
  // Lightning's "run_training_batch": the step, backward and the optimizer step, with their hooks (stopped below, or
  // by its destructor when the batch fails).
  ProfileAction run_training_batch(context_.profiler, "run_training_batch");
  absl::Status status = TrainingStep(model, train, batch_idx, std::move(raw), step_now, result);
  // A manual step met a non-finite loss (on_nonfinite_loss "stop"): that is the run's error.
  if (!status.ok()) return manual_ != nullptr && !manual_->failure().ok() ? manual_->failure() : status;
  if (result.skip_rest_of_epoch) {
    *stop = true;
    return absl::OkStatus();
  }
  bool stepped = false;
  if (manual_ != nullptr) {
    if (manual_->skipped()) ++skipped_batches_;
    stepped = manual_->steps() > 0;
    if (stepped) {
      ++optim_progress_.in_epoch;
      if (absl::Status logged = LogStep(); !logged.ok()) return logged;
    }
  } else {
    if (result.nonfinite && options.on_nonfinite_loss == "stop") {
      return NonFiniteLossError(
          std::isfinite(result.loss_value) ? "not finite on another rank" : absl::StrCat(result.loss_value),
          epoch_progress_.current, batch_idx, optim_progress_.total);
    }
    if (loss_check_->full()) {
      if (absl::Status checked = CheckPendingLosses(); !checked.ok()) return checked;
    }
    stepped = step_now && !SkipsBatch(result, batch_idx, step_now);
    if (stepped) {
      ++optim_progress_.in_epoch;
      if (absl::Status optimized = optimization_.Step(model); !optimized.ok()) return optimized;
      if (absl::Status logged = LogStep(); !logged.ok()) return logged;
    }
  }
  run_training_batch.Stop();
  batch_progress_.resume = batch_idx + 1;
  batch_progress_.started = batch_idx + 1;
  context_.progress->Step(batch_idx, optim_progress_.total, [&] { return metrics_->ProgressBarMetrics(); });
  status = CallUser("on_train_batch_end", [&] {
    // The detach is spared when nothing reads `outputs` (issue #41): no callbacks, and the module's hook is the
    // default (which says so the first time it runs).
    if (context_.callbacks.empty() && model.train_batch_end_is_default()) return;
    const at::Tensor outputs = result.loss.defined() ? result.loss.detach() : at::Tensor();
    context_.CallCallbacks("on_train_batch_end",
        [&](Callback& c) { c.on_train_batch_end(trainer, model, outputs, result.batch, batch_idx); });
    context_.CallModuleHook("on_train_batch_end", model,
                            [&] { model.on_train_batch_end(outputs, result.batch, batch_idx); });
  });
  // A checkpoint the callbacks asked for found a non-finite loss (save_checkpoint): that is the run's error.
  if (!status.ok()) return loss_check_->failure().ok() ? status : loss_check_->failure();
  return AfterBatch(model, val, batch_idx, last_batch, stepped, stop);
}

absl::Status TrainingEpochLoop::AfterBatch(LightningModule& model, const std::vector<DataLoader*>& val,
                                           int64_t batch_idx, bool last_batch, bool stepped, bool* stop) {
  Trainer& trainer = context_.trainer;
  const TrainerOptions& options = trainer.options();
  batch_progress_.completed = batch_idx + 1;
  const bool val_now = validate_this_epoch_ && ((batch_idx + 1) % limits_.val_check_batch == 0 ||
                                                (last_batch && limits_.val_at_epoch_end));
  const bool max_steps_reached = options.max_steps >= 0 && optim_progress_.total >= options.max_steps;
  if (val_now || (max_steps_reached && validate_this_epoch_ && limits_.val_at_epoch_end)) {
    if (absl::Status checked = CheckPendingLosses(); !checked.ok()) return checked;
    // The validation loop counts its batches (val_loop().batch_progress()).
    absl::StatusOr<MetricMap> val_metrics = val_loop_.Run(model, val, limits_.val_batches_per_loader);
    if (!val_metrics.ok()) return val_metrics.status();
  }
  // Step-interval metric schedulers step after the batch's validation, as Lightning's plateau schedulers do.
  for (size_t i = 0; stepped && manual_ == nullptr && i < context_.optimizers.schedulers.size(); ++i) {
    const SchedulerConfig& scheduler = context_.optimizers.schedulers[i];
    if (scheduler.interval == SchedulerConfig::Interval::kStep && IsMetricScheduler(scheduler) &&
        optim_progress_.total % scheduler.frequency == 0) {
      if (absl::Status stepped_scheduler = optimization_.StepScheduler(i); !stepped_scheduler.ok()) {
        return stepped_scheduler;
      }
    }
  }
  batches_that_stepped_ = optim_progress_.total;
  // Every rank must stop at the same batch: a stop that one rank decided (its timer, say) is shared.
  if (trainer.strategy()->world_size() > 1) {
    absl::Status status = CallUser("agreeing on should_stop", [&] {
      if (trainer.strategy()->ReduceAny(trainer.should_stop())) trainer.set_should_stop();
    });
    if (!status.ok()) return status;
  }
  const bool min_epochs_met = !options.min_epochs.has_value() || epoch_progress_.current + 1 >= *options.min_epochs;
  *stop = max_steps_reached || (trainer.should_stop() && min_epochs_met);
  return absl::OkStatus();
}

absl::Status TrainingEpochLoop::StepEpochSchedulers(bool ran_batches) {
  if (manual_ != nullptr) return absl::OkStatus();  // Under manual optimization the step steps its schedulers.
  for (size_t i = 0; i < context_.optimizers.schedulers.size(); ++i) {
    const SchedulerConfig& scheduler = context_.optimizers.schedulers[i];
    if (scheduler.interval != SchedulerConfig::Interval::kEpoch ||
        (epoch_progress_.current + 1) % scheduler.frequency != 0) {
      continue;
    }
    if (IsMetricScheduler(scheduler) && !ran_batches) {
      // Resumed from a checkpoint written after this epoch's last batch but before its validation: the value the
      // step needs was never computed in this run (Lightning skips plateau schedulers when restarting too).
      LOG(WARNING) << "not stepping the scheduler that monitors '" << scheduler.monitor << "' at the end of epoch "
                   << epoch_progress_.current
                   << ": the run resumed after the epoch's last batch, before its validation";
      continue;
    }
    if (absl::Status stepped = optimization_.StepScheduler(i); !stepped.ok()) return stepped;
  }
  return absl::OkStatus();
}

absl::Status TrainingEpochLoop::End(LightningModule& model, bool ran_batches) {
  Trainer& trainer = context_.trainer;
  if (absl::Status checked = CheckPendingLosses(); !checked.ok()) return checked;
  loss_check_->Stop();
  Merge(context_.callback_metrics, metrics_->StepMetrics());
  Strategy& strategy = *trainer.strategy();
  MetricMap epoch_metrics;
  absl::Status status = CallUser("reducing sync_dist metrics", [&] {
    epoch_metrics = GlobalMetrics(strategy, *metrics_, metrics_->EpochMetrics(), /*steps=*/false);
  });
  if (!status.ok()) return status;
  Merge(context_.callback_metrics, epoch_metrics);
  // Epoch schedulers step after the epoch's last validation, before on_train_epoch_end: a checkpoint written from
  // there on holds the stepped schedule with the next epoch, so resuming never steps it twice or misses a step.
  if (absl::Status stepped = StepEpochSchedulers(ran_batches); !stepped.ok()) return stepped;
  // A checkpoint written from here on resumes at the start of the next epoch.
  epoch_progress_.resume = epoch_progress_.current + 1;
  batch_progress_.resume = 0;
  train_loader_state_ = c10::IValue();
  status = CallUser("on_train_epoch_end", [&] {
    model.set_metric_sink(metrics_.get(), 1);
    context_.CallCallbacks(
        "on_train_epoch_end", [&](Callback& c) { c.on_train_epoch_end(trainer, model); }, /*monitoring=*/false);
    context_.CallModuleHook("on_train_epoch_end", model, [&] { model.on_train_epoch_end(); });
    model.set_metric_sink(nullptr, 0);
    epoch_metrics = GlobalMetrics(strategy, *metrics_, metrics_->EpochMetrics(), /*steps=*/false);
    Merge(context_.callback_metrics, epoch_metrics);
    context_.CallCallbacks(
        "on_train_epoch_end", [&](Callback& c) { c.on_train_epoch_end(trainer, model); }, /*monitoring=*/true);
  });
  if (!status.ok()) return status;
  // Lightning logs the epoch's metrics at the step of its last batch.
  if (!epoch_metrics.empty()) trainer.log_metrics(epoch_metrics, std::max<int64_t>(0, trainer.logged_step() - 1));
  for (const auto& logger : trainer.options().loggers) {
    if (!trainer.is_global_zero()) break;  // Only rank zero logs.
    if (absl::Status saved = logger->save(); !saved.ok())
      LOG(WARNING) << "logger '" << logger->name() << "': " << saved;
  }
  context_.progress->EndEpoch(epoch_progress_.current, context_.callback_metrics);
  return absl::OkStatus();
}

}  // namespace kiln
