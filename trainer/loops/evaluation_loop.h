// The evaluation loop (Lightning's loops/evaluation_loop.py): validation, during fit (sanity check, every
// val_check_interval) and alone (Trainer::validate), and testing (Trainer::test). Internal to //trainer.
#ifndef KILN_TRAINER_LOOPS_EVALUATION_LOOP_H_
#define KILN_TRAINER_LOOPS_EVALUATION_LOOP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/lightning_module.h"
#include "trainer/core/metrics.h"
#include "trainer/loops/progress.h"

namespace kiln {

struct LoopContext;
class Trainer;

class EvaluationLoop {
 public:
  // `stage`: Stage::kValidate or Stage::kTest. `context` outlives the loop.
  EvaluationLoop(LoopContext& context, Stage stage);

  // Trainer::validate / test inside the entry point's set-up: restores `ckpt_path` (the weights only), claims the
  // loggers' folders, sets the data up, runs each of the stage's loaders (limit_val_batches / limit_test_batches of
  // each) and tears down. Returns the metrics.
  absl::StatusOr<MetricMap> RunStage(LightningModule& model, DataModule& data, const std::string& ckpt_path);

  // One pass over the first limits[i] batches of each of `loaders`, in order, with the stage's hooks, in no-grad
  // and eval mode. Returns the metrics the steps logged (each with "/dataloader_idx_<i>" when there are two loaders
  // or more, as Lightning names them) and the epoch-end hook's, with the last step's beside them, reduced over the
  // processes where logged with sync_dist; outside the sanity check they join callback_metrics and are logged. A run
  // that succeeds counts its batches (batch_progress()).
  absl::StatusOr<MetricMap> Run(LightningModule& model, const std::vector<DataLoader*>& loaders,
                                const std::vector<int64_t>& limits);

  // A loader's `batch` as a step gets it: through the module's on_before_batch_transfer, transfer_batch_to_device
  // (to the strategy's device) and on_after_batch_transfer, then the precision plugin's ConvertInput. Every loop's
  // batches come this way. Throws what the hooks throw.
  static Batch TransferBatch(const LoopContext& context, LightningModule& model, Batch batch, int64_t dataloader_idx);
  // The same, unprofiled, for a pass outside the loops (StochasticWeightAveraging's batch-norm pass in on_train_end).
  static Batch TransferBatch(Trainer& trainer, LightningModule& model, Batch batch, int64_t dataloader_idx);

  // The validation batches run in the training epoch and in the last run, as fit's validation loop counts them
  // (Lightning's val_loop.batch_progress); StartEpoch starts the epoch's count, load_state_dict sets both.
  const EvaluationProgress& batch_progress() const { return batch_progress_; }
  void StartEpoch() { batch_progress_.in_epoch = 0; }
  void load_state_dict(const EvaluationProgress& progress) { batch_progress_ = progress; }

 private:
  bool validating() const { return stage_ == Stage::kValidate; }
  void StartHooks(LightningModule& model);
  void RunBatch(LightningModule& model, DataLoader& loader, int64_t batch_idx, int64_t dataloader_idx,
                MetricCollector& metrics);
  absl::StatusOr<MetricMap> Finish(LightningModule& model, const std::vector<std::unique_ptr<MetricCollector>>& steps,
                                   const MetricCollector& epoch_end);

  LoopContext& context_;
  const Stage stage_;
  EvaluationProgress batch_progress_;
};

// The raw pointers of `loaders`, in order.
std::vector<DataLoader*> LoaderPointers(const std::vector<std::shared_ptr<DataLoader>>& loaders);

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_EVALUATION_LOOP_H_
