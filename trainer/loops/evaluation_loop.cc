#include "trainer/loops/evaluation_loop.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "torch/utils.h"
#include "trainer/loops/call_user.h"
#include "trainer/loops/rank_agreement.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/progress.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {

EvaluationLoop::EvaluationLoop(Trainer& trainer, Stage stage) : trainer_(trainer), stage_(stage) {}

absl::StatusOr<MetricMap> EvaluationLoop::RunStage(LightningModule& model, DataModule& data,
                                                   const std::string& ckpt_path) {
  Trainer& trainer = trainer_;
  if (!ckpt_path.empty()) {
    if (absl::Status status = trainer.RestoreCheckpoint(model, ckpt_path, /*restore_training=*/false); !status.ok()) {
      return status;
    }
  }
  if (absl::Status claimed = trainer.SetupLoggers(); !claimed.ok()) return claimed;
  std::shared_ptr<DataLoader> loader;
  absl::Status status = CallUser("setup", [&] {
    data.setup(stage_);
    loader = validating() ? data.val_dataloader() : data.test_dataloader();
    trainer.CallCallbacks([&](Callback& c) { c.setup(trainer, model, stage_); });
  });
  if (!status.ok()) return status;
  if (loader == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(validating() ? "validate needs a val_dataloader" : "test needs a test_dataloader",
                     "; the data module returned none"));
  }
  if (absl::Status sharded = ShardLoaders(*trainer.strategy_, {loader.get()}); !sharded.ok()) return sharded;
  const TrainerOptions& options = trainer.options_;
  absl::StatusOr<int64_t> limit =
      (validating() ? options.limit_val_batches : options.limit_test_batches)
          .Resolve(loader->num_batches(), validating() ? "limit_val_batches" : "limit_test_batches");
  if (!limit.ok()) return limit.status();
  absl::StatusOr<MetricMap> metrics = Run(model, *loader, *limit);
  status = CallUser("teardown", [&] { trainer.CallCallbacks([&](Callback& c) { c.teardown(trainer, model, stage_); }); });
  if (metrics.ok() && !status.ok()) return status;
  for (const auto& logger : options.loggers) {
    if (!trainer.is_global_zero()) break;  // Only rank zero logs.
    if (absl::Status finalized = logger->finalize(); !finalized.ok()) LOG(WARNING) << finalized;
  }
  return metrics;
}

void EvaluationLoop::StartHooks(LightningModule& model) {
  trainer_.CallCallbacks([&](Callback& c) {
    if (validating()) {
      c.on_validation_start(trainer_, model);
      c.on_validation_epoch_start(trainer_, model);
    } else {
      c.on_test_start(trainer_, model);
      c.on_test_epoch_start(trainer_, model);
    }
  });
}

void EvaluationLoop::RunBatch(LightningModule& model, DataLoader& loader, int64_t batch_idx,
                              MetricCollector& metrics) {
  Trainer& trainer = trainer_;
  PrecisionPlugin& precision = *trainer.precision_;
  Batch batch = precision.ConvertInput(trainer.strategy_->BatchToDevice(loader.get_batch(batch_idx)));
  trainer.CallCallbacks([&](Callback& c) {
    validating() ? c.on_validation_batch_start(trainer, model, batch, batch_idx)
                 : c.on_test_batch_start(trainer, model, batch, batch_idx);
  });
  model.set_metric_sink(&metrics, batch.size());
  {
    PrecisionPlugin::ForwardContext forward_context(precision);
    validating() ? model.validation_step(batch, batch_idx) : model.test_step(batch, batch_idx);
  }
  model.set_metric_sink(nullptr, 0);
  trainer.CallCallbacks([&](Callback& c) {
    validating() ? c.on_validation_batch_end(trainer, model, batch, batch_idx)
                 : c.on_test_batch_end(trainer, model, batch, batch_idx);
  });
}

absl::StatusOr<MetricMap> EvaluationLoop::Run(LightningModule& model, DataLoader& loader, int64_t limit) {
  Trainer& trainer = trainer_;
  if (absl::Status agreed = CheckNoEmptyShard(*trainer.strategy_, limit, validating() ? "validation" : "test");
      !agreed.ok()) {
    return agreed;
  }
  MetricCollector metrics(/*training=*/false);
  SinkGuard sink_guard(model);
  model.eval();
  ProgressReporter& progress = *trainer.progress_;
  absl::Status status = CallUser(validating() ? "validation loop" : "test loop", [&] {
    StartHooks(model);
    torch::NoGradGuard no_grad;
    loader.set_epoch(0);
    progress.StartEvaluation(trainer.sanity_checking_ ? "Sanity Checking" : validating() ? "Validation" : "Testing",
                             limit);
    for (int64_t batch_idx = 0; batch_idx < limit; ++batch_idx) {
      RunBatch(model, loader, batch_idx, metrics);
      progress.EvaluationStep(batch_idx);
    }
    model.set_metric_sink(&metrics, 1);
    validating() ? model.on_validation_epoch_end() : model.on_test_epoch_end();
    model.set_metric_sink(nullptr, 0);
  });
  progress.EndEvaluation();
  if (!status.ok()) return status;
  return Finish(model, metrics);
}

absl::StatusOr<MetricMap> EvaluationLoop::Finish(LightningModule& model, const MetricCollector& metrics) {
  Trainer& trainer = trainer_;
  MetricMap result = metrics.EpochMetrics();
  Merge(result, metrics.StepMetrics());
  absl::Status status = CallUser("reducing sync_dist metrics", [&] {
    result = GlobalMetrics(*trainer.strategy_, metrics, std::move(result), /*steps=*/true);
  });
  if (!status.ok()) return status;
  if (!trainer.sanity_checking_) {
    Merge(trainer.callback_metrics_, result);
    trainer.log_metrics(result, trainer.logged_step());
  }
  status = CallUser(validating() ? "on_validation_end" : "on_test_end", [&] {
    if (validating()) {
      trainer.CallCallbacks([&](Callback& c) { c.on_validation_epoch_end(trainer, model); });
      trainer.CallCallbacks([&](Callback& c) { c.on_validation_end(trainer, model); });
    } else {
      trainer.CallCallbacks([&](Callback& c) { c.on_test_epoch_end(trainer, model); });
      trainer.CallCallbacks([&](Callback& c) { c.on_test_end(trainer, model); });
    }
  });
  if (!status.ok()) return status;
  return result;
}

}  // namespace kiln
