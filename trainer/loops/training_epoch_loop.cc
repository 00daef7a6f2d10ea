#include "trainer/loops/training_epoch_loop.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "trainer/core/device_skip_optimizer.h"
#include "trainer/loops/automatic_optimization.h"
#include "trainer/loops/call_user.h"
#include "trainer/loops/evaluation_loop.h"
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

TrainingEpochLoop::TrainingEpochLoop(Trainer& trainer, const TrainingLimits& limits, bool automatic)
    : trainer_(trainer),
      limits_(limits),
      optimization_(trainer),
      manual_(automatic ? nullptr : std::make_unique<ManualOptimization>(trainer)) {}

TrainingEpochLoop::~TrainingEpochLoop() = default;

bool TrainingEpochLoop::ChecksLossOnDevice() const {
  const Trainer& trainer = trainer_;
  // A device whose kernels run on the CPU (c10's CPU device type) has computed the loss by the time training_step
  // returns: reading it waits for nothing, and costs less than the flag's two operators (callgrind, the tiny MLP:
  // about 11,800 instructions a step, issue #41). Devices that compute on their own, including a PrivateUse1 device
  // that computes on the host, keep the flag.
  if (trainer.strategy_->root_device().is_cpu()) return false;
  if (manual_ != nullptr || trainer.options_.on_nonfinite_loss != "stop" || trainer.strategy_->world_size() > 1 ||
      trainer.optimizers_.optimizers.empty() || trainer.precision_->precision() == Precision::k16Mixed) {
    return false;
  }
  for (const auto& optimizer : trainer.optimizers_.optimizers) {
    const auto* skipping = dynamic_cast<const DeviceSkipOptimizer*>(optimizer.get());
    if (skipping == nullptr || !skipping->can_skip_on_device()) return false;
  }
  return true;
}

absl::Status TrainingEpochLoop::Run(LightningModule& model, DataLoader& train, const std::vector<DataLoader*>& val) {
  SinkGuard sink_guard(model);
  LiveMetrics live(trainer_.live_step_metrics_, trainer_.callback_metrics_, metrics_);
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
  Strategy& strategy = *trainer_.strategy_;
  return CallUser("train_dataloader's next_batch", [&] {
    *next = train.next_batch();
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
        CallUser("train_dataloader's state_dict", [&] { trainer_.train_loader_state_ = train.state_dict(); });
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

absl::StatusOr<int64_t> TrainingEpochLoop::Start(LightningModule& model, DataLoader& train, const std::vector<DataLoader*>& val) {
  Trainer& trainer = trainer_;
  const int64_t first_batch = trainer.next_epoch_ == trainer.current_epoch_ ? trainer.next_batch_in_epoch_ : 0;
  trainer.next_epoch_ = trainer.current_epoch_;
  trainer.next_batch_in_epoch_ = first_batch;
  trainer.batches_done_in_epoch_ = first_batch;
  if (first_batch == 0) {
    trainer.batches_completed_in_epoch_ = 0;
    trainer.steps_in_epoch_ = 0;
    trainer.scheduler_steps_in_epoch_ = 0;
    trainer.val_batches_in_epoch_ = 0;
  }
  validate_this_epoch_ = !val.empty() && limits_.val_batches > 0 &&
                         (trainer.current_epoch_ + 1) % trainer.options_.check_val_every_n_epoch == 0;
  model.train();
  const bool stream = train.num_batches() == DataLoader::kUnknownLength;
  trainer.progress_->StartEpoch(trainer.current_epoch_, trainer.max_epochs_,
                                stream && limits_.train_batches == INT64_MAX ? -1 : limits_.train_batches);
  trainer.loss_check_->Start(ChecksLossOnDevice(), trainer.optimizers_.optimizers);
  absl::Status status = CallUser("on_train_epoch_start", [&] {
    trainer.CallCallbacks([&](Callback& c) { c.on_train_epoch_start(trainer, model); });
    model.on_train_epoch_start();
    // overfit_batches trains on the same batches, in the same order, every epoch.
    train.set_epoch(trainer.options_.overfit_batches.is_zero() ? trainer.current_epoch_ : 0);
  });
  if (!status.ok()) return status;
  if (stream && first_batch > 0) {
    // Resuming inside the epoch: the stream goes back to where the checkpoint was taken.
    if (trainer.restored_loader_state_.isNone()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint was taken at batch ", first_batch, " of epoch ", trainer.current_epoch_, ", but the "
          "training loader is a stream that keeps no position (its state_dict() returns None), so the run cannot "
          "go on from there; implement DataLoader::state_dict and load_state_dict, or resume from a checkpoint taken "
          "at an epoch's end"));
    }
    absl::Status loaded = CallUser("train_dataloader's load_state_dict", [&] {
      absl::Status restored = train.load_state_dict(trainer.restored_loader_state_);
      TORCH_CHECK_VALUE(restored.ok(), restored.message());
    });
    if (!loaded.ok()) return loaded;
    trainer.train_loader_state_ = trainer.restored_loader_state_;
  }
  trainer.restored_loader_state_ = c10::IValue();
  return first_batch;
}

absl::Status TrainingEpochLoop::TrainingStep(LightningModule& model, DataLoader& train, int64_t batch_idx,
                                             std::optional<Batch> raw, bool step_now, StepResult& result) {
  Trainer& trainer = trainer_;
  PrecisionPlugin& precision = *trainer.precision_;
  Strategy& strategy = *trainer.strategy_;
  const int64_t accumulate = trainer.options_.accumulate_grad_batches;
  const bool automatic = manual_ == nullptr;
  return CallUser("training_step", [&] {
    result.batch = EvaluationLoop::TransferBatch(
        trainer, model, raw.has_value() ? *std::move(raw) : train.get_batch(batch_idx), /*dataloader_idx=*/0);
    trainer.CallCallbacks([&](Callback& c) { c.on_train_batch_start(trainer, model, result.batch, batch_idx); });
    if (model.on_train_batch_start(result.batch, batch_idx) == -1) {
      result.skip_rest_of_epoch = true;
      return;
    }
    model.set_metric_sink(&metrics_, result.batch.size());
    if (!automatic) {
      manual_->StartBatch(model, batch_idx);
      model.set_manual_optimization_driver(manual_.get());
    }
    {
      PrecisionPlugin::ForwardContext forward_context(precision);
      result.loss = model.training_step(result.batch, batch_idx);
    }
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
    if (trainer.loss_check_->on_device()) {
      trainer.loss_check_->Add(result.loss, trainer.current_epoch_, batch_idx, trainer.global_step_);
    } else {
      result.loss_value = HostValue(result.loss);
      result.nonfinite = !std::isfinite(result.loss_value);
      if (strategy.world_size() > 1) result.nonfinite = strategy.ReduceAny(result.nonfinite);
      if (result.nonfinite) return;
    }
    const at::Tensor to_backward = precision.PreBackward(accumulate > 1 ? result.loss / accumulate : result.loss);
    trainer.CallCallbacks([&](Callback& c) { c.on_before_backward(trainer, model, to_backward); });
    model.on_before_backward(to_backward);
    strategy.Backward(to_backward, /*sync_gradients=*/step_now);
    trainer.CallCallbacks([&](Callback& c) { c.on_after_backward(trainer, model); });
    model.on_after_backward();
  });
}

bool TrainingEpochLoop::SkipsBatch(const StepResult& result, int64_t batch_idx, bool step_now) {
  Trainer& trainer = trainer_;
  bool skip = false;
  if (result.nonfinite) {
    LOG(WARNING) << "skipping epoch " << trainer.current_epoch_ << " batch " << batch_idx
                 << ": the training loss is " << result.loss_value << " (on_nonfinite_loss=\"skip\")";
    ++trainer.skipped_batches_;
    skip = true;
    trainer.skip_window_ = !step_now;
  } else if (trainer.skip_window_) {
    skip = true;
    trainer.skip_window_ = !step_now;
  }
  if (skip && step_now) {
    for (const auto& optimizer : trainer.optimizers_.optimizers) ZeroGradToNone(*optimizer);
  }
  return skip;
}

absl::Status TrainingEpochLoop::LogStep() {
  Trainer& trainer = trainer_;
  const TrainerOptions& options = trainer.options_;
  // Step metrics stay tensors until something reads them: the loggers, now, or callback_metrics().
  // Values logged with sync_dist are reduced at the same steps on every rank, for rank zero to log.
  const bool log_now = options.log_every_n_steps > 0 && trainer.global_step_ % options.log_every_n_steps == 0 &&
                       !options.loggers.empty();
  const bool reduce_now = log_now && trainer.strategy_->world_size() > 1 && metrics_.HasSyncedStepValues();
  if (!log_now || !(trainer.is_global_zero() || reduce_now)) return absl::OkStatus();
  // A row never holds values of a batch whose loss was not finite.
  if (absl::Status checked = trainer.CheckPendingLosses(); !checked.ok()) return checked;
  MetricMap step_metrics = metrics_.StepMetrics();
  if (reduce_now) {
    absl::Status status = CallUser("reducing sync_dist metrics", [&] {
      step_metrics = GlobalMetrics(*trainer.strategy_, metrics_, std::move(step_metrics), /*steps=*/true);
    });
    if (!status.ok()) return status;
  }
  trainer.log_metrics(std::move(step_metrics), trainer.logged_step());
  return absl::OkStatus();
}

absl::Status TrainingEpochLoop::RunBatch(LightningModule& model, DataLoader& train,
                                         const std::vector<DataLoader*>& val, int64_t batch_idx,
                                         std::optional<Batch> raw, bool last_batch, bool* stop) {
  Trainer& trainer = trainer_;
  const TrainerOptions& options = trainer.options_;
  const bool step_now = (batch_idx + 1) % options.accumulate_grad_batches == 0 || last_batch;
  StepResult result;
  ++trainer.batches_total_;
  absl::Status status = TrainingStep(model, train, batch_idx, std::move(raw), step_now, result);
  // A manual step met a non-finite loss (on_nonfinite_loss "stop"): that is the run's error.
  if (!status.ok()) return manual_ != nullptr && !manual_->failure().ok() ? manual_->failure() : status;
  if (result.skip_rest_of_epoch) {
    *stop = true;
    return absl::OkStatus();
  }
  bool stepped = false;
  if (manual_ != nullptr) {
    if (manual_->skipped()) ++trainer.skipped_batches_;
    stepped = manual_->steps() > 0;
    if (stepped) {
      ++trainer.steps_in_epoch_;
      if (absl::Status logged = LogStep(); !logged.ok()) return logged;
    }
  } else {
    if (result.nonfinite && options.on_nonfinite_loss == "stop") {
      return NonFiniteLossError(
          std::isfinite(result.loss_value) ? "not finite on another rank" : absl::StrCat(result.loss_value),
          trainer.current_epoch_, batch_idx, trainer.global_step_);
    }
    if (trainer.loss_check_->full()) {
      if (absl::Status checked = trainer.CheckPendingLosses(); !checked.ok()) return checked;
    }
    stepped = step_now && !SkipsBatch(result, batch_idx, step_now);
    if (stepped) {
      ++trainer.steps_in_epoch_;
      if (absl::Status optimized = optimization_.Step(model); !optimized.ok()) return optimized;
      if (absl::Status logged = LogStep(); !logged.ok()) return logged;
    }
  }
  trainer.next_batch_in_epoch_ = batch_idx + 1;
  trainer.batches_done_in_epoch_ = batch_idx + 1;
  trainer.progress_->Step(batch_idx, trainer.global_step_, [&] { return metrics_.ProgressBarMetrics(); });
  status = CallUser("on_train_batch_end", [&] {
    // The detach is spared when nothing reads `outputs` (issue #41): no callbacks, and the module's hook is the
    // default (which says so the first time it runs).
    if (trainer.callbacks_.empty() && model.train_batch_end_is_default()) return;
    const at::Tensor outputs = result.loss.defined() ? result.loss.detach() : at::Tensor();
    trainer.CallCallbacks([&](Callback& c) { c.on_train_batch_end(trainer, model, outputs, result.batch, batch_idx); });
    model.on_train_batch_end(outputs, result.batch, batch_idx);
  });
  // A checkpoint the callbacks asked for found a non-finite loss (save_checkpoint): that is the run's error.
  if (!status.ok()) return trainer.loss_check_->failure().ok() ? status : trainer.loss_check_->failure();
  return AfterBatch(model, val, batch_idx, last_batch, stepped, stop);
}

absl::Status TrainingEpochLoop::AfterBatch(LightningModule& model, const std::vector<DataLoader*>& val,
                                           int64_t batch_idx, bool last_batch, bool stepped, bool* stop) {
  Trainer& trainer = trainer_;
  const TrainerOptions& options = trainer.options_;
  trainer.batches_completed_in_epoch_ = batch_idx + 1;
  const bool val_now = validate_this_epoch_ && ((batch_idx + 1) % limits_.val_check_batch == 0 ||
                                                (last_batch && limits_.val_at_epoch_end));
  const bool max_steps_reached = options.max_steps >= 0 && trainer.global_step_ >= options.max_steps;
  if (val_now || (max_steps_reached && validate_this_epoch_ && limits_.val_at_epoch_end)) {
    if (absl::Status checked = trainer.CheckPendingLosses(); !checked.ok()) return checked;
    absl::StatusOr<MetricMap> val_metrics =
        EvaluationLoop(trainer, Stage::kValidate).Run(model, val, limits_.val_batches_per_loader);
    if (!val_metrics.ok()) return val_metrics.status();
    trainer.val_batches_last_run_ = limits_.val_batches;  // What EvaluationLoop::Run ran.
    trainer.val_batches_in_epoch_ += trainer.val_batches_last_run_;
  }
  // Step-interval metric schedulers step after the batch's validation, as Lightning's plateau schedulers do.
  for (size_t i = 0; stepped && manual_ == nullptr && i < trainer.optimizers_.schedulers.size(); ++i) {
    const SchedulerConfig& scheduler = trainer.optimizers_.schedulers[i];
    if (scheduler.interval == SchedulerConfig::Interval::kStep && IsMetricScheduler(scheduler) &&
        trainer.global_step_ % scheduler.frequency == 0) {
      if (absl::Status stepped_scheduler = optimization_.StepScheduler(i); !stepped_scheduler.ok()) {
        return stepped_scheduler;
      }
    }
  }
  trainer.batches_that_stepped_ = trainer.global_step_;
  // Every rank must stop at the same batch: a stop that one rank decided (its timer, say) is shared.
  if (trainer.strategy_->world_size() > 1) {
    absl::Status status = CallUser("agreeing on should_stop",
                                   [&] { trainer.should_stop_ = trainer.strategy_->ReduceAny(trainer.should_stop_); });
    if (!status.ok()) return status;
  }
  const bool min_epochs_met = !options.min_epochs.has_value() || trainer.current_epoch_ + 1 >= *options.min_epochs;
  *stop = max_steps_reached || (trainer.should_stop_ && min_epochs_met);
  return absl::OkStatus();
}

absl::Status TrainingEpochLoop::StepEpochSchedulers(bool ran_batches) {
  Trainer& trainer = trainer_;
  if (manual_ != nullptr) return absl::OkStatus();  // Under manual optimization the step steps its schedulers.
  for (size_t i = 0; i < trainer.optimizers_.schedulers.size(); ++i) {
    const SchedulerConfig& scheduler = trainer.optimizers_.schedulers[i];
    if (scheduler.interval != SchedulerConfig::Interval::kEpoch ||
        (trainer.current_epoch_ + 1) % scheduler.frequency != 0) {
      continue;
    }
    if (IsMetricScheduler(scheduler) && !ran_batches) {
      // Resumed from a checkpoint written after this epoch's last batch but before its validation: the value the
      // step needs was never computed in this run (Lightning skips plateau schedulers when restarting too).
      LOG(WARNING) << "not stepping the scheduler that monitors '" << scheduler.monitor << "' at the end of epoch "
                   << trainer.current_epoch_ << ": the run resumed after the epoch's last batch, before its validation";
      continue;
    }
    if (absl::Status stepped = optimization_.StepScheduler(i); !stepped.ok()) return stepped;
  }
  return absl::OkStatus();
}

absl::Status TrainingEpochLoop::End(LightningModule& model, bool ran_batches) {
  Trainer& trainer = trainer_;
  if (absl::Status checked = trainer.CheckPendingLosses(); !checked.ok()) return checked;
  trainer.loss_check_->Stop();
  Merge(trainer.callback_metrics_, metrics_.StepMetrics());
  Strategy& strategy = *trainer.strategy_;
  MetricMap epoch_metrics;
  absl::Status status = CallUser("reducing sync_dist metrics", [&] {
    epoch_metrics = GlobalMetrics(strategy, metrics_, metrics_.EpochMetrics(), /*steps=*/false);
  });
  if (!status.ok()) return status;
  Merge(trainer.callback_metrics_, epoch_metrics);
  // Epoch schedulers step after the epoch's last validation, before on_train_epoch_end: a checkpoint written from
  // there on holds the stepped schedule with the next epoch, so resuming never steps it twice or misses a step.
  if (absl::Status stepped = StepEpochSchedulers(ran_batches); !stepped.ok()) return stepped;
  // A checkpoint written from here on resumes at the start of the next epoch.
  trainer.next_epoch_ = trainer.current_epoch_ + 1;
  trainer.next_batch_in_epoch_ = 0;
  trainer.train_loader_state_ = c10::IValue();
  status = CallUser("on_train_epoch_end", [&] {
    model.set_metric_sink(&metrics_, 1);
    trainer.CallCallbacks([&](Callback& c) { c.on_train_epoch_end(trainer, model); }, /*monitoring=*/false);
    model.on_train_epoch_end();
    model.set_metric_sink(nullptr, 0);
    epoch_metrics = GlobalMetrics(strategy, metrics_, metrics_.EpochMetrics(), /*steps=*/false);
    Merge(trainer.callback_metrics_, epoch_metrics);
    trainer.CallCallbacks([&](Callback& c) { c.on_train_epoch_end(trainer, model); }, /*monitoring=*/true);
  });
  if (!status.ok()) return status;
  // Lightning logs the epoch's metrics at the step of its last batch.
  if (!epoch_metrics.empty()) trainer.log_metrics(epoch_metrics, std::max<int64_t>(0, trainer.logged_step() - 1));
  for (const auto& logger : trainer.options_.loggers) {
    if (!trainer.is_global_zero()) break;  // Only rank zero logs.
    if (absl::Status saved = logger->save(); !saved.ok()) LOG(WARNING) << "logger '" << logger->name() << "': " << saved;
  }
  trainer.progress_->EndEpoch(trainer.current_epoch_, trainer.callback_metrics_);
  return absl::OkStatus();
}

}  // namespace kiln
