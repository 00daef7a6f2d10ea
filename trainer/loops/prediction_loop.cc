#include "trainer/loops/prediction_loop.h"

#include <memory>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "torch/utils.h"
#include "trainer/loops/call_user.h"
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
  Trainer& trainer = trainer_;
  if (!ckpt_path.empty()) {
    if (absl::Status status = trainer.RestoreCheckpoint(model, ckpt_path, /*restore_training=*/false); !status.ok()) {
      return status;
    }
  }
  std::shared_ptr<DataLoader> loader;
  absl::Status status = CallUser("setup", [&] {
    data.setup(Stage::kPredict);
    loader = data.predict_dataloader();
    trainer.CallCallbacks([&](Callback& c) { c.setup(trainer, model, Stage::kPredict); });
  });
  if (!status.ok()) return status;
  if (loader == nullptr) {
    return absl::InvalidArgumentError("predict needs a predict_dataloader; the data module returned none");
  }
  if (absl::Status sharded = ShardLoaders(*trainer.strategy_, {loader.get()}); !sharded.ok()) return sharded;
  absl::StatusOr<int64_t> limit =
      trainer.options_.limit_predict_batches.Resolve(loader->num_batches(), "limit_predict_batches");
  if (!limit.ok()) return limit.status();
  if (absl::Status agreed = CheckNoEmptyShard(*trainer.strategy_, *limit, "predict"); !agreed.ok()) return agreed;
  absl::StatusOr<std::vector<at::Tensor>> predictions = Predict(model, *loader, *limit);
  if (!predictions.ok()) return predictions;
  status = CallUser("teardown",
                    [&] { trainer.CallCallbacks([&](Callback& c) { c.teardown(trainer, model, Stage::kPredict); }); });
  if (!status.ok()) return status;
  if (trainer.strategy_->world_size() <= 1 || predictions->empty()) return predictions;  // Empty: on every rank.
  std::vector<at::Tensor> shards;
  status = CallUser("gathering predictions", [&] { shards = trainer.strategy_->AllGather(at::cat(*predictions)); });
  if (!status.ok()) return status;
  absl::StatusOr<at::Tensor> all = InterleaveShards(shards);
  if (!all.ok()) return all.status();
  return std::vector<at::Tensor>{*std::move(all)};
}

absl::StatusOr<std::vector<at::Tensor>> PredictionLoop::Predict(LightningModule& model, DataLoader& loader,
                                                                int64_t limit) {
  Trainer& trainer = trainer_;
  PrecisionPlugin& precision = *trainer.precision_;
  std::vector<at::Tensor> predictions;
  model.eval();
  absl::Status status = CallUser("predict_step", [&] {
    trainer.CallCallbacks([&](Callback& c) {
      c.on_predict_start(trainer, model);
      c.on_predict_epoch_start(trainer, model);
    });
    torch::NoGradGuard no_grad;
    loader.set_epoch(0);
    for (int64_t batch_idx = 0; batch_idx < limit; ++batch_idx) {
      Batch batch = precision.ConvertInput(trainer.strategy_->BatchToDevice(loader.get_batch(batch_idx)));
      trainer.CallCallbacks([&](Callback& c) { c.on_predict_batch_start(trainer, model, batch, batch_idx); });
      at::Tensor prediction;
      {
        PrecisionPlugin::ForwardContext forward_context(precision);
        prediction = model.predict_step(batch, batch_idx);
      }
      trainer.CallCallbacks([&](Callback& c) { c.on_predict_batch_end(trainer, model, prediction, batch, batch_idx); });
      predictions.push_back(prediction.to(at::kCPU));
    }
    trainer.CallCallbacks([&](Callback& c) {
      c.on_predict_epoch_end(trainer, model);
      c.on_predict_end(trainer, model);
    });
  });
  if (!status.ok()) return status;
  return predictions;
}

}  // namespace kiln
