// The training epoch loop (Lightning's loops/training_epoch_loop.py): one epoch of training batches, with
// gradient accumulation, the optimizer step (AutomaticOptimization), validation every val_check_interval, step
// logging, the schedulers, and the guarantee that no non-finite loss is trained on. It lives as long as its FitLoop
// and owns the progress of the batches, the optimizer steps, the schedulers and, through its validation loop, the
// validation batches (progress.h). Internal to //trainer.
#ifndef KILN_TRAINER_LOOPS_TRAINING_EPOCH_LOOP_H_
#define KILN_TRAINER_LOOPS_TRAINING_EPOCH_LOOP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ATen/core/Tensor.h"
#include "ATen/core/ivalue.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/core/batch.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/lightning_module.h"
#include "trainer/core/metrics.h"
#include "trainer/loops/automatic_optimization.h"
#include "trainer/loops/evaluation_loop.h"
#include "trainer/loops/progress.h"

namespace kiln {

class DeviceLossCheck;
class ManualOptimization;
struct LoopContext;
struct LoopProgress;

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
  // `epoch_progress`: the fit loop's, whose current epoch this loop runs and which it marks done (the epoch a
  // checkpoint resumes in) once the epoch's batches and schedulers are. Both outlive the loop.
  TrainingEpochLoop(LoopContext& context, EpochProgress& epoch_progress);
  ~TrainingEpochLoop();

  // Runs the current epoch, `limits` of it: from the batch a restored checkpoint names when it resumes this epoch,
  // else from the first, until the epoch's last batch, max_steps or a stop that the minimum epochs allow. `val` (may
  // be empty: the validation loaders, in order) is validated on as val_check_interval and check_val_every_n_epoch
  // say. The module's automatic_optimization() false runs its steps under manual optimization.
  absl::Status Run(LightningModule& model, const TrainingLimits& limits, DataLoader& train,
                   const std::vector<DataLoader*>& val);

  // Every counter of a fresh run zero, for `schedulers` schedulers; no batch skipped, no loader position.
  void Reset(size_t schedulers);
  // This loop's part of where the loops stand (FitLoop::state_dict), and back.
  void AddToStateDict(LoopProgress& progress) const;
  void load_state_dict(const LoopProgress& progress, const std::vector<int64_t>& scheduler_steps);

  // Reads the device's non-finite flag (a host read) when losses are pending; when one of them was not finite,
  // returns the error that stops fit, naming the first such batch, with the counters put back to it.
  absl::Status CheckPendingLosses();

  const BatchProgress& batch_progress() const { return batch_progress_; }
  const OptimizerProgress& optim_progress() const { return optim_progress_; }
  const SchedulerProgress& scheduler_progress() const { return scheduler_progress_; }
  int64_t global_step() const { return optim_progress_.total; }
  // Trainer::logged_step(): Lightning's _batches_that_stepped, global_step() once a training batch is done.
  int64_t batches_that_stepped() const { return batches_that_stepped_; }
  // Batches skipped for a non-finite loss (on_nonfinite_loss="skip") in the last fit.
  int64_t skipped_batches() const { return skipped_batches_; }
  AutomaticOptimization& automatic_optimization() { return optimization_; }
  const EvaluationLoop& val_loop() const { return val_loop_; }

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

  LoopContext& context_;
  EpochProgress& epoch_progress_;  // The fit loop's.
  BatchProgress batch_progress_;
  OptimizerProgress optim_progress_;
  SchedulerProgress scheduler_progress_;
  int64_t batches_that_stepped_ = 0;
  int64_t skipped_batches_ = 0;
  bool skip_window_ = false;  // The rest of an accumulation window that had a non-finite loss.
  // A stream's position (DataLoader::state_dict) after the last batch taken, for checkpoints; and the one a restored
  // checkpoint holds, until the epoch it resumes starts.
  c10::IValue train_loader_state_;
  c10::IValue restored_loader_state_;
  // The device-side check that no non-finite loss is trained on (loss_check.h).
  std::unique_ptr<DeviceLossCheck> loss_check_;
  AutomaticOptimization optimization_;
  EvaluationLoop val_loop_;  // Validation inside the epoch; it counts its batches.

  // The running epoch's: its limits, its manual optimization (null under automatic optimization), its metrics.
  TrainingLimits limits_;
  std::unique_ptr<ManualOptimization> manual_;
  std::unique_ptr<MetricCollector> metrics_;
  bool validate_this_epoch_ = false;
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_TRAINING_EPOCH_LOOP_H_
