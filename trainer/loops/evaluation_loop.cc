#include "trainer/loops/evaluation_loop.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "torch/utils.h"
#include "trainer/loops/call_user.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/rank_agreement.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/progress.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {

EvaluationLoop::EvaluationLoop(LoopContext& context, Stage stage) : context_(context), stage_(stage) {}

absl::StatusOr<MetricMap> EvaluationLoop::RunStage(LightningModule& model, DataModule& data,
                                                   const std::string& ckpt_path) {
  Trainer& trainer = context_.trainer;
  // Lightning's order: the setup hooks, then the checkpoint (on_load_checkpoint), then the loggers and loaders.
  std::vector<std::shared_ptr<DataLoader>> loaders;
  absl::Status status = CallUser("setup", [&] {
    context_.CallSetupHooks(data, model, stage_);
  });
  if (!status.ok()) return status;
  if (!ckpt_path.empty()) {
    if (absl::Status restored =
            context_.restore_checkpoint(model, ckpt_path, /*restore_training=*/false, /*data=*/nullptr);
        !restored.ok()) {
      return restored;
    }
  }
  if (absl::Status claimed = context_.setup_loggers(); !claimed.ok()) return claimed;
  status = CallUser("setup", [&] { loaders = validating() ? data.val_dataloaders() : data.test_dataloaders(); });
  if (!status.ok()) return status;
  if (loaders.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(validating() ? "validate needs a val_dataloader" : "test needs a test_dataloader",
                     "; the data module returned none"));
  }
  for (size_t i = 0; i < loaders.size(); ++i) {
    if (loaders[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("the data module's ",
                                                     validating() ? "val_dataloaders" : "test_dataloaders",
                                                     "() gave a null loader at index ", i, " of ", loaders.size(),
                                                     "; return only loaders that exist"));
    }
  }
  const std::vector<DataLoader*> pointers = LoaderPointers(loaders);
  if (absl::Status sharded = ShardLoaders(*trainer.strategy(), pointers); !sharded.ok()) return sharded;
  const TrainerOptions& options = trainer.options();
  std::vector<int64_t> limits;
  for (DataLoader* loader : pointers) {
    absl::StatusOr<int64_t> limit =
        (validating() ? options.limit_val_batches : options.limit_test_batches)
            .Resolve(loader->num_batches(), validating() ? "limit_val_batches" : "limit_test_batches");
    if (!limit.ok()) return limit.status();
    limits.push_back(*limit);
  }
  absl::StatusOr<MetricMap> metrics = Run(model, pointers, limits);
  status = CallUser("teardown", [&] {
    context_.CallTeardownHooks(model, stage_);
  });
  if (metrics.ok() && !status.ok()) return status;
  // A logger that could not write what it holds fails the run, as after fit (the metrics would be missing).
  if (absl::Status finalized = context_.finalize_loggers(metrics.ok()); !finalized.ok() && metrics.ok())
    return finalized;
  return metrics;
}

Batch EvaluationLoop::TransferBatch(Trainer& trainer, LightningModule& model, Batch batch, int64_t dataloader_idx) {
  batch = model.on_before_batch_transfer(std::move(batch), dataloader_idx);
  batch = model.transfer_batch_to_device(batch, trainer.strategy()->root_device(), dataloader_idx);
  batch = model.on_after_batch_transfer(std::move(batch), dataloader_idx);
  return trainer.precision_plugin()->ConvertInput(batch);
}

Batch EvaluationLoop::TransferBatch(const LoopContext& context, LightningModule& model, Batch batch,
                                    int64_t dataloader_idx) {
  Trainer& trainer = context.trainer;
  batch = context.CallModuleHook("on_before_batch_transfer", model,
                                 [&] { return model.on_before_batch_transfer(std::move(batch), dataloader_idx); });
  batch = context.CallStrategyHook("batch_to_device", [&] {
    return context.CallModuleHook("transfer_batch_to_device", model, [&] {
      return model.transfer_batch_to_device(batch, trainer.strategy()->root_device(), dataloader_idx);
    });
  });
  batch = context.CallModuleHook("on_after_batch_transfer", model,
                                 [&] { return model.on_after_batch_transfer(std::move(batch), dataloader_idx); });
  return trainer.precision_plugin()->ConvertInput(batch);
}

void EvaluationLoop::StartHooks(LightningModule& model) {
  Trainer& trainer = context_.trainer;
  if (validating()) {
    context_.CallModuleHook("on_validation_model_eval", model, [&] { model.on_validation_model_eval(); });
    context_.CallCallbacks("on_validation_start", [&](Callback& c) { c.on_validation_start(trainer, model); });
    context_.CallModuleHook("on_validation_start", model, [&] { model.on_validation_start(); });
    context_.CallCallbacks("on_validation_epoch_start",
                           [&](Callback& c) { c.on_validation_epoch_start(trainer, model); });
    context_.CallModuleHook("on_validation_epoch_start", model, [&] { model.on_validation_epoch_start(); });
  } else {
    context_.CallModuleHook("on_test_model_eval", model, [&] { model.on_test_model_eval(); });
    context_.CallCallbacks("on_test_start", [&](Callback& c) { c.on_test_start(trainer, model); });
    context_.CallModuleHook("on_test_start", model, [&] { model.on_test_start(); });
    context_.CallCallbacks("on_test_epoch_start", [&](Callback& c) { c.on_test_epoch_start(trainer, model); });
    context_.CallModuleHook("on_test_epoch_start", model, [&] { model.on_test_epoch_start(); });
  }
}

void EvaluationLoop::RunBatch(LightningModule& model, DataLoader& loader, int64_t batch_idx, int64_t dataloader_idx,
                              MetricCollector& metrics) {
  Trainer& trainer = context_.trainer;
  PrecisionPlugin& precision = *trainer.precision_plugin();
  // Lightning's "[_EvaluationLoop].val_next" (test_next when testing): the loader's next batch.
  Batch batch = TransferBatch(
      context_, model,
      context_.ProfileLoopAction(validating() ? "[_EvaluationLoop].val_next" : "[_EvaluationLoop].test_next",
                                 [&] { return loader.get_batch(batch_idx); }),
      dataloader_idx);
  const char* batch_start = validating() ? "on_validation_batch_start" : "on_test_batch_start";
  const char* batch_end = validating() ? "on_validation_batch_end" : "on_test_batch_end";
  context_.CallCallbacks(batch_start, [&](Callback& c) {
    validating() ? c.on_validation_batch_start(trainer, model, batch, batch_idx, dataloader_idx)
                 : c.on_test_batch_start(trainer, model, batch, batch_idx, dataloader_idx);
  });
  context_.CallModuleHook(batch_start, model, [&] {
    validating() ? model.on_validation_batch_start(batch, batch_idx, dataloader_idx)
                 : model.on_test_batch_start(batch, batch_idx, dataloader_idx);
  });
  model.set_metric_sink(&metrics, batch.size());
  context_.CallStrategyHook(validating() ? "validation_step" : "test_step", [&] {
    PrecisionPlugin::ForwardContext forward_context(precision);
    validating() ? model.validation_step(batch, batch_idx, dataloader_idx)
                 : model.test_step(batch, batch_idx, dataloader_idx);
  });
  model.set_metric_sink(nullptr, 0);
  context_.CallCallbacks(batch_end, [&](Callback& c) {
    validating() ? c.on_validation_batch_end(trainer, model, batch, batch_idx, dataloader_idx)
                 : c.on_test_batch_end(trainer, model, batch, batch_idx, dataloader_idx);
  });
  context_.CallModuleHook(batch_end, model, [&] {
    validating() ? model.on_validation_batch_end(batch, batch_idx, dataloader_idx)
                 : model.on_test_batch_end(batch, batch_idx, dataloader_idx);
  });
}

absl::StatusOr<MetricMap> EvaluationLoop::Run(LightningModule& model, const std::vector<DataLoader*>& loaders,
                                              const std::vector<int64_t>& limits) {
  Trainer& trainer = context_.trainer;
  for (int64_t limit : limits) {
    if (absl::Status agreed = CheckNoEmptyShard(*trainer.strategy(), limit, validating() ? "validation" : "test");
        !agreed.ok()) {
      return agreed;
    }
  }
  // One collector per loader, so that each loader's metrics are named and reduced apart, and with several loaders
  // one for the epoch-end hook, whose metrics belong to no loader. With one loader, one collector, as before.
  std::vector<std::unique_ptr<MetricCollector>> steps;
  for (size_t i = 0; i < loaders.size(); ++i) steps.push_back(std::make_unique<MetricCollector>(/*training=*/false));
  MetricCollector epoch_end(/*training=*/false);
  MetricCollector& end_sink = steps.size() == 1 ? *steps[0] : epoch_end;
  SinkGuard sink_guard(model);
  ProgressReporter& progress = *context_.progress;
  const char* what = trainer.sanity_checking() ? "Sanity Checking" : validating() ? "Validation" : "Testing";
  absl::Status status = CallUser(validating() ? "validation loop" : "test loop", [&] {
    StartHooks(model);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < loaders.size(); ++i) {
      const std::string label = loaders.size() > 1 ? absl::StrCat(what, " DataLoader ", i) : std::string(what);
      loaders[i]->set_epoch(0);
      progress.StartEvaluation(label.c_str(), limits[i]);
      for (int64_t batch_idx = 0; batch_idx < limits[i]; ++batch_idx) {
        RunBatch(model, *loaders[i], batch_idx, static_cast<int64_t>(i), *steps[i]);
        progress.EvaluationStep(batch_idx);
      }
      if (i + 1 < loaders.size()) progress.EndEvaluation();
    }
    // Lightning's order: the callbacks' epoch-end hooks, then the module's (whose log() calls count), and the
    // epoch's metrics are reduced after both.
    const char* epoch_end_hook = validating() ? "on_validation_epoch_end" : "on_test_epoch_end";
    context_.CallCallbacks(epoch_end_hook, [&](Callback& c) {
      validating() ? c.on_validation_epoch_end(trainer, model) : c.on_test_epoch_end(trainer, model);
    });
    model.set_metric_sink(&end_sink, 1);
    context_.CallModuleHook(epoch_end_hook, model,
                            [&] { validating() ? model.on_validation_epoch_end() : model.on_test_epoch_end(); });
    model.set_metric_sink(nullptr, 0);
  });
  progress.EndEvaluation();
  if (!status.ok()) return status;
  absl::StatusOr<MetricMap> metrics = Finish(model, steps, epoch_end);
  if (!metrics.ok()) return metrics;
  batch_progress_.last_run = 0;
  for (int64_t limit : limits) batch_progress_.last_run += limit;
  batch_progress_.in_epoch += batch_progress_.last_run;
  return metrics;
}

absl::StatusOr<MetricMap> EvaluationLoop::Finish(LightningModule& model,
                                                 const std::vector<std::unique_ptr<MetricCollector>>& steps,
                                                 const MetricCollector& epoch_end) {
  Trainer& trainer = context_.trainer;
  MetricMap result;
  // Every rank reduces the same collectors in the same order (with one loader, its collector holds the epoch end's
  // metrics too).
  const size_t collectors = steps.size() == 1 ? 1 : steps.size() + 1;
  absl::Status status = CallUser("reducing sync_dist metrics", [&] {
    for (size_t i = 0; i < collectors; ++i) {
      const MetricCollector& metrics = i < steps.size() ? *steps[i] : epoch_end;
      MetricMap reduced = metrics.EpochMetrics();
      Merge(reduced, metrics.StepMetrics());
      reduced = GlobalMetrics(*trainer.strategy(), metrics, std::move(reduced), /*steps=*/true);
      if (i < steps.size() && steps.size() > 1) {
        MetricMap named;
        for (auto& [name, value] : reduced) named[absl::StrCat(name, "/dataloader_idx_", i)] = std::move(value);
        reduced = std::move(named);
      }
      Merge(result, reduced);
    }
  });
  if (!status.ok()) return status;
  if (!trainer.sanity_checking()) {
    Merge(context_.callback_metrics, result);
    trainer.log_metrics(result, trainer.logged_step());
  }
  status = CallUser(validating() ? "on_validation_end" : "on_test_end", [&] {
    if (validating()) {
      context_.CallCallbacks("on_validation_end", [&](Callback& c) { c.on_validation_end(trainer, model); });
      context_.CallModuleHook("on_validation_end", model, [&] { model.on_validation_end(); });
      context_.CallModuleHook("on_validation_model_train", model, [&] { model.on_validation_model_train(); });
    } else {
      context_.CallCallbacks("on_test_end", [&](Callback& c) { c.on_test_end(trainer, model); });
      context_.CallModuleHook("on_test_end", model, [&] { model.on_test_end(); });
      context_.CallModuleHook("on_test_model_train", model, [&] { model.on_test_model_train(); });
    }
  });
  if (!status.ok()) return status;
  return result;
}

std::vector<DataLoader*> LoaderPointers(const std::vector<std::shared_ptr<DataLoader>>& loaders) {
  std::vector<DataLoader*> pointers;
  pointers.reserve(loaders.size());
  for (const auto& loader : loaders) pointers.push_back(loader.get());
  return pointers;
}

}  // namespace kiln
