// What the Trainer does for layers that synchronise across processes (Lightning's LayerSync plugin and its
// TorchSyncBatchNorm; internal to //trainer): for one entry point, it gives every kiln::SyncBatchNorm of the module
// without a group of its own the strategy's process group, and with sync_batchnorm, for fit under several
// processes, first converts the module's torch::nn::BatchNorm{1,2,3}d layers (trainer/core/sync_batch_norm.h) and
// adds the callback that stops the run when a converted layer's original BatchNorm ran instead of it. Destroying it,
// when the entry point ends, takes the groups back and puts the BatchNorms back (Lightning's revert at teardown).
// Thread-compatible: the loop thread's.
#ifndef KILN_TRAINER_LAYER_SYNC_H_
#define KILN_TRAINER_LAYER_SYNC_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "connector/plan.h"
#include "torch/nn/module.h"
#include "trainer/core/callback.h"
#include "trainer/core/sync_batch_norm.h"
#include "trainer/strategies/strategy.h"

namespace kiln {

class LayerSync {
 public:
  explicit LayerSync(torch::nn::Module& model) : model_(model) {}
  ~LayerSync();
  LayerSync(const LayerSync&) = delete;
  LayerSync& operator=(const LayerSync&) = delete;

  // sync_batchnorm for fit, before the strategy's Setup (which then places and broadcasts the converted tree):
  // converts the BatchNorms when `strategy` is distributed and the plan has more than one process, and says in the
  // log what it did, or why nothing (one process; no BatchNorm in the tree).
  void ConvertBatchNorms(const Plan& plan, const Strategy& strategy);
  // After the strategy's Setup: every kiln::SyncBatchNorm of the tree without a group gets the strategy's
  // (LayerSyncProcessGroup). FailedPrecondition when layers were converted and the strategy gives no group.
  absl::Status Attach(const Strategy& strategy);
  // The callback that checks the converted layers after the first training batch; null when none was converted.
  std::shared_ptr<Callback> check_callback() const { return check_; }

 private:
  torch::nn::Module& model_;
  std::shared_ptr<SyncBatchNormConversion> conversion_;
  std::vector<std::shared_ptr<SyncBatchNormImpl>> attached_;  // The layers given the strategy's group.
  std::shared_ptr<Callback> check_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_LAYER_SYNC_H_
