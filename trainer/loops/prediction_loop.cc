#include "trainer/loops/prediction_loop.h"

#include <memory>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "torch/utils.h"
#include "trainer/loops/call_user.h"
#include "trainer/loops/evaluation_loop.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/rank_agreement.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {

absl::StatusOr<at::Tensor> InterleaveShards(const std::vector<at::Tensor>& shards) {
  int64_t total = 0;
  for (const at::Tensor& shard : shards) total += shard.size(0);
  const int64_t world = static_cast<int64_t>(shards.size());
  // Global row i is row i / W of shard i % W; one gather, with each shard's offset in the concatenation.
  std::vector<int64_t> offsets;
  for (int64_t rank = 0, offset = 0; rank < world; offset += shards[rank].size(0), ++rank) {
    if (shards[rank].size(0) != (total - rank + world - 1) / world) {
      return absl::InternalError(absl::StrCat("predict: rank ", rank, " returned ", shards[rank].size(0),
                                              " predictions, which does not fit ", total, " interleaved over ", world,
                                              " ranks (the predict loader breaks DataLoader::set_shard's "
                                              "contract)"));
    }
    offsets.push_back(offset);
  }
  const at::Tensor row = at::arange(total, at::TensorOptions().dtype(at::kLong));
  const at::Tensor source = at::tensor(offsets, at::TensorOptions().dtype(at::kLong))
                                .index_select(0, row.remainder(world))
                                .add(row.div(world, "floor"));
  return at::cat(shards).index_select(0, source);
}

absl::StatusOr<std::vector<at::Tensor>> PredictionLoop::Run(LightningModule& model, DataModule& data,
                                                            const std::string& ckpt_path) {
  Trainer& trainer = context_.trainer;
  // Lightning's order: the setup hooks, then the checkpoint (on_load_checkpoint), then the loaders.
  std::vector<std::shared_ptr<DataLoader>> loaders;
  absl::Status status = CallUser("setup", [&] {
    context_.CallSetupHooks(data, model, Stage::kPredict);
  });
  if (!status.ok()) return status;
  if (!ckpt_path.empty()) {
    if (absl::Status restored =
            context_.restore_checkpoint(model, ckpt_path, /*restore_training=*/false, /*data=*/nullptr);
        !restored.ok()) {
      return restored;
    }
  }
  status = CallUser("setup", [&] { loaders = data.predict_dataloaders(); });
  if (!status.ok()) return status;
  if (loaders.empty()) {
    return absl::InvalidArgumentError("predict needs a predict_dataloader; the data module returned none");
  }
  for (size_t i = 0; i < loaders.size(); ++i) {
    if (loaders[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("the data module's predict_dataloaders() gave a null loader at "
                                                     "index ", i, " of ", loaders.size(),
                                                     "; return only loaders that exist"));
    }
  }
  const std::vector<DataLoader*> pointers = LoaderPointers(loaders);
  if (absl::Status sharded = ShardLoaders(*trainer.strategy(), pointers); !sharded.ok()) return sharded;
  std::vector<int64_t> limits;
  for (DataLoader* loader : pointers) {
    absl::StatusOr<int64_t> limit =
        trainer.options().limit_predict_batches.Resolve(loader->num_batches(), "limit_predict_batches");
    if (!limit.ok()) return limit.status();
    if (absl::Status agreed = CheckNoEmptyShard(*trainer.strategy(), *limit, "predict"); !agreed.ok()) return agreed;
    limits.push_back(*limit);
  }
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> per_loader = Predict(model, pointers, limits);
  if (!per_loader.ok()) return per_loader.status();
  status = CallUser("teardown",
                    [&] { context_.CallTeardownHooks(model, Stage::kPredict); });
  if (!status.ok()) return status;
  std::vector<at::Tensor> predictions;
  for (std::vector<at::Tensor>& loader_predictions : *per_loader) {
    // Empty: on every rank (the limits agree).
    if (trainer.strategy()->world_size() <= 1 || loader_predictions.empty()) {
      for (at::Tensor& prediction : loader_predictions) predictions.push_back(std::move(prediction));
      continue;
    }
    std::vector<at::Tensor> shards;
    status = CallUser("gathering predictions",
                      [&] { shards = trainer.strategy()->AllGather(at::cat(loader_predictions)); });
    if (!status.ok()) return status;
    absl::StatusOr<at::Tensor> all = InterleaveShards(shards);
    if (!all.ok()) return all.status();
    predictions.push_back(*std::move(all));
  }
  return predictions;
}

absl::StatusOr<std::vector<std::vector<at::Tensor>>> PredictionLoop::Predict(LightningModule& model,
                                                                             const std::vector<DataLoader*>& loaders,
                                                                             const std::vector<int64_t>& limits) {
  Trainer& trainer = context_.trainer;
  PrecisionPlugin& precision = *trainer.precision_plugin();
  std::vector<std::vector<at::Tensor>> predictions(loaders.size());
  absl::Status status = CallUser("predict_step", [&] {
    context_.CallModuleHook("on_predict_model_eval", model, [&] { model.on_predict_model_eval(); });
    context_.CallCallbacks("on_predict_start", [&](Callback& c) { c.on_predict_start(trainer, model); });
    context_.CallModuleHook("on_predict_start", model, [&] { model.on_predict_start(); });
    context_.CallCallbacks("on_predict_epoch_start", [&](Callback& c) { c.on_predict_epoch_start(trainer, model); });
    context_.CallModuleHook("on_predict_epoch_start", model, [&] { model.on_predict_epoch_start(); });
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < loaders.size(); ++i) {
      const auto dataloader_idx = static_cast<int64_t>(i);
      DataLoader& loader = *loaders[i];
      loader.set_epoch(0);
      for (int64_t batch_idx = 0; batch_idx < limits[i]; ++batch_idx) {
        Batch batch = EvaluationLoop::TransferBatch(
            context_, model,
            context_.ProfileLoopAction("[_PredictionLoop].predict_next", [&] { return loader.get_batch(batch_idx); }),
            dataloader_idx);
        context_.CallCallbacks("on_predict_batch_start",
            [&](Callback& c) { c.on_predict_batch_start(trainer, model, batch, batch_idx, dataloader_idx); });
        context_.CallModuleHook("on_predict_batch_start", model,
                                [&] { model.on_predict_batch_start(batch, batch_idx, dataloader_idx); });
        at::Tensor prediction;
        context_.CallStrategyHook("predict_step", [&] {
          PrecisionPlugin::ForwardContext forward_context(precision);
          prediction = model.predict_step(batch, batch_idx, dataloader_idx);
        });
        context_.CallCallbacks("on_predict_batch_end", [&](Callback& c) {
          c.on_predict_batch_end(trainer, model, prediction, batch, batch_idx, dataloader_idx);
        });
        context_.CallModuleHook("on_predict_batch_end", model,
                                [&] { model.on_predict_batch_end(prediction, batch, batch_idx, dataloader_idx); });
        predictions[i].push_back(prediction.to(at::kCPU));
      }
    }
    context_.CallCallbacks("on_predict_epoch_end", [&](Callback& c) { c.on_predict_epoch_end(trainer, model); });
    context_.CallModuleHook("on_predict_epoch_end", model, [&] { model.on_predict_epoch_end(); });
    context_.CallCallbacks("on_predict_end", [&](Callback& c) { c.on_predict_end(trainer, model); });
    context_.CallModuleHook("on_predict_end", model, [&] { model.on_predict_end(); });
  });
  if (!status.ok()) return status;
  return predictions;
}

}  // namespace kiln
