// The prediction loop (Lightning's loops/prediction_loop.py): Trainer::predict. Internal to //trainer.
#ifndef KILN_TRAINER_LOOPS_PREDICTION_LOOP_H_
#define KILN_TRAINER_LOOPS_PREDICTION_LOOP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/lightning_module.h"

namespace kiln {

struct LoopContext;

// The rows of `shards` (rank r's predictions of examples r, r + W, r + 2W, ...: the DataLoader::set_shard contract)
// put back in the data's order, as one tensor. An error when a shard's size does not fit that contract.
absl::StatusOr<at::Tensor> InterleaveShards(const std::vector<at::Tensor>& shards);

class PredictionLoop {
 public:
  // `context` outlives the loop.
  explicit PredictionLoop(LoopContext& context) : context_(context) {}

  // Trainer::predict inside the entry point's set-up: restores `ckpt_path` (the weights only), sets the data up,
  // runs predict_step over limit_predict_batches of each predict loader in turn (DataModule::predict_dataloaders) in
  // no-grad and eval mode, and tears down. One tensor per batch, on the CPU, loader after loader; with several
  // processes, every rank gets one tensor per loader of every process's predictions, in the data's order.
  absl::StatusOr<std::vector<at::Tensor>> Run(LightningModule& model, DataModule& data, const std::string& ckpt_path);

 private:
  // Each loader's predictions, one tensor per batch, in order.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Predict(LightningModule& model,
                                                               const std::vector<DataLoader*>& loaders,
                                                               const std::vector<int64_t>& limits);

  LoopContext& context_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_PREDICTION_LOOP_H_
