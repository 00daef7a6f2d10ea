// The training epoch loop (Lightning's loops/training_epoch_loop.py): one epoch of training batches, with
// gradient accumulation, the optimizer step (AutomaticOptimization), validation every val_check_interval, step
// logging, the schedulers, and the guarantee that no non-finite loss is trained on. Internal to //trainer.
#ifndef KILN_TRAINER_LOOPS_TRAINING_EPOCH_LOOP_H_
#define KILN_TRAINER_LOOPS_TRAINING_EPOCH_LOOP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/core/batch.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/lightning_module.h"
#include "trainer/core/metrics.h"
#include "trainer/loops/automatic_optimization.h"

namespace kiln {

class Trainer;
class ManualOptimization;

// How much of each loader an epoch runs, as the fit loop resolved it from the limits and val_check_interval.
struct TrainingLimits {
  int64_t train_batches = 0;
  int64_t val_batches = 0;                     // One validation run's batches, all loaders together.
  std::vector<int64_t> val_batches_per_loader;  // Each validation loader's share of them, in order.
  int64_t val_check_batch = 0;  // Validate after every this many training batches (0: only at the epoch's end).
  bool val_at_epoch_end = true;
};

class TrainingEpochLoop {
 public:
  // `automatic`: the module's automatic_optimization(); false runs its steps under manual optimization.
  TrainingEpochLoop(Trainer& trainer, const TrainingLimits& limits, bool automatic = true);
  ~TrainingEpochLoop();

  // Runs the trainer's current epoch: from the batch a restored checkpoint names when it resumes this epoch, else
  // from the first, until the epoch's last batch, max_steps or a stop that the minimum epochs allow. `val` (may be
  // empty: the validation loaders, in order) is validated on as val_check_interval and check_val_every_n_epoch say.
  absl::Status Run(LightningModule& model, DataLoader& train, const std::vector<DataLoader*>& val);

 private:
  // What a batch's training step produced.
  struct StepResult {
    Batch batch;
    at::Tensor loss;
    double loss_value = 0;   // Read on the host only when the loss is not checked on the device.
    bool nonfinite = false;  // On any rank.
    bool skip_rest_of_epoch = false;  // on_train_batch_start returned -1.
  };

  // Whether this epoch checks the training loss on the device: a device that does not compute on the CPU,
  // on_nonfinite_loss "stop", one process, no gradient scaler, and every optimizer a DeviceSkipOptimizer that can
  // skip there.
  bool ChecksLossOnDevice() const;
  // The counters, train mode, progress, the loss check and on_train_epoch_start. Returns the first batch.
  absl::StatusOr<int64_t> Start(LightningModule& model, DataLoader& train, const std::vector<DataLoader*>& val);
  // One batch: `raw` (a stream's), or else the loader's get_batch(batch_idx); `last_batch` when the epoch's data
  // ends with it. `*stop` when the epoch ends after it (max_steps, should_stop).
  absl::Status RunBatch(LightningModule& model, DataLoader& train, const std::vector<DataLoader*>& val,
                        int64_t batch_idx, std::optional<Batch> raw, bool last_batch, bool* stop);
  // A stream's epoch (DataLoader::kUnknownLength), from batch `first_batch`; `*ran_batches` when it ran any.
  absl::Status RunStream(LightningModule& model, DataLoader& train, const std::vector<DataLoader*>& val,
                         int64_t first_batch, bool* ran_batches);
  // The stream's next batch into `*next` (reset at the end of the epoch's data on any rank).
  absl::Status FetchNext(DataLoader& train, std::optional<Batch>* next);
  // training_step, the loss check and backward.
  absl::Status TrainingStep(LightningModule& model, DataLoader& train, int64_t batch_idx, std::optional<Batch> raw,
                            bool step_now, StepResult& result);
  // Whether this batch is skipped for a non-finite loss (on_nonfinite_loss="skip"): the whole accumulation window
  // it belongs to goes, with its gradients.
  bool SkipsBatch(const StepResult& result, int64_t batch_idx, bool step_now);
  // The step's metrics to the loggers every log_every_n_steps (reduced first where logged with sync_dist).
  absl::Status LogStep();
  // Validation, the step-interval metric schedulers and the agreement on should_stop after batch `batch_idx`.
  absl::Status AfterBatch(LightningModule& model, const std::vector<DataLoader*>& val, int64_t batch_idx,
                          bool last_batch, bool stepped, bool* stop);
  // The epoch's metrics, the epoch-interval schedulers, on_train_epoch_end and the epoch's log row.
  absl::Status End(LightningModule& model, bool ran_batches);
  absl::Status StepEpochSchedulers(bool ran_batches);

  Trainer& trainer_;
  const TrainingLimits limits_;
  AutomaticOptimization optimization_;
  std::unique_ptr<ManualOptimization> manual_;  // Null under automatic optimization.
  MetricCollector metrics_{/*training=*/true};
  bool validate_this_epoch_ = false;
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_TRAINING_EPOCH_LOOP_H_
