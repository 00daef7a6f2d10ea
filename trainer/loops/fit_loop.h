// The fit loop (Lightning's loops/fit_loop.py): Trainer::fit inside the entry point's set-up. It gets the data and
// the optimizers, resolves how much of each loader an epoch runs, restores a checkpoint, runs the sanity check, and
// then its TrainingEpochLoop once per epoch until max_epochs, max_steps or a stop. The Trainer holds one FitLoop for
// its lifetime, and through it the epoch loop and its optimization and validation: the loops' progress (progress.h)
// lives there, the Trainer's counters (current_epoch(), global_step(), ...) read it, and checkpoints save and restore
// it (state_dict, load_state_dict). Internal to //trainer.
#ifndef KILN_TRAINER_LOOPS_FIT_LOOP_H_
#define KILN_TRAINER_LOOPS_FIT_LOOP_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/lightning_module.h"
#include "trainer/loops/progress.h"
#include "trainer/loops/training_epoch_loop.h"

namespace kiln {

struct LoopContext;
struct LoopProgress;
struct PreflightPlan;
struct TrainerOptions;

// Lightning's number of epochs when neither max_epochs nor max_steps is set.
inline constexpr int64_t kDefaultMaxEpochs = 1000;

class FitLoop {
 public:
  // `context` outlives the loop (the Trainer owns both).
  explicit FitLoop(LoopContext& context);

  absl::Status Run(LightningModule& model, DataModule& data, const std::string& ckpt_path);

  // The counters of a fresh run: every progress counter zero (each of the configured optimizers' schedulers
  // included), no stop asked for, no batch skipped, no loader position; the callback metrics and resumed_from
  // cleared.
  void Reset();
  // Where the loops stand, as a checkpoint written now holds it (the checkpoint's "loops" entry and Kiln's own
  // position; each scheduler's steps are epoch_loop().scheduler_progress()'s), and back: a restored checkpoint's
  // position and `scheduler_steps`, from which the next epoch run resumes.
  LoopProgress state_dict() const;
  void load_state_dict(const LoopProgress& progress, const std::vector<int64_t>& scheduler_steps);

  const EpochProgress& epoch_progress() const { return epoch_progress_; }
  TrainingEpochLoop& epoch_loop() { return epoch_loop_; }
  const TrainingEpochLoop& epoch_loop() const { return epoch_loop_; }
  LoopContext& context() const { return context_; }
  // max_epochs as the last fit resolved it (kDefaultMaxEpochs when neither limit was set), and its training batches
  // per epoch.
  int64_t max_epochs() const { return max_epochs_; }
  int64_t num_training_batches() const { return num_training_batches_; }
  // One validation run's batches, all loaders together, as the last fit resolved them (0: no validation).
  int64_t num_val_batches() const { return limits_.val_batches; }
  bool sanity_checking() const { return sanity_checking_; }
  // Trainer::should_stop() and set_should_stop(): the epoch ends after its batch, and fit after the epoch once
  // min_epochs allows.
  bool should_stop() const { return should_stop_; }
  void set_should_stop() { should_stop_ = true; }

  // How much of each loader an epoch runs: limit_train_batches of `train_batches`, limit_val_batches of each
  // validation loader's batches (`val_batches`, one per loader, in order; none: no validation), and where
  // val_check_interval validates. `options` passed their checks (trainer_options.h); what is left to refuse is an
  // interval longer than the epoch.
  static absl::StatusOr<TrainingLimits> ResolveLimits(const TrainerOptions& options, int64_t train_batches,
                                                      const std::vector<int64_t>& val_batches);
  // The same with one validation loader of `val_batches` batches (-1: none).
  static absl::StatusOr<TrainingLimits> ResolveLimits(const TrainerOptions& options, int64_t train_batches,
                                                      int64_t val_batches);

 private:
  // data.setup(kFit) and its loaders, sharded over the processes.
  absl::Status SetupData(LightningModule& model, DataModule& data);
  // configure_optimizers, after the limits so that a schedule can span the run (estimated_stepping_batches).
  absl::Status ConfigureOptimizers(LightningModule& model);
  // The counters of a fresh run, then those of `ckpt_path` when given ("last" with no checkpoint at all under
  // default_root_dir: a warning, and the fresh run's).
  absl::Status Restart(LightningModule& model, DataModule& data, const std::string& ckpt_path);
  // The monitors of the callbacks and schedulers against the validation schedule and what a dry validation step
  // logs (preflight.h), before the run folder exists.
  absl::Status Preflight(LightningModule& model);
  // The metric names one validation step on each validation loader's first batch logs, with nothing else run (no
  // hooks but the batch transfer's, no gradients, eval mode, the CPU generator put back).
  absl::StatusOr<std::set<std::string>> DryValidationMetrics(LightningModule& model);
  // The optimizer steps one epoch of the limits takes (its training batches over accumulate_grad_batches, rounded
  // up); 0 for a stream of unknown length.
  int64_t OptimizerStepsPerEpoch() const;
  // The run's length in epochs and optimizer steps, and what bounds each, into `plan` (after ConfigureOptimizers).
  void PlanRunLength(const LightningModule& model, PreflightPlan& plan) const;
  // setup and on_fit_start of the callbacks and the module, and the hyperparameters to the loggers.
  absl::Status Start(LightningModule& model);
  // num_sanity_val_steps of validation, leaving the generator as it found it (so that resuming stays exact).
  absl::Status SanityCheck(LightningModule& model);
  // Whether training is over (max_steps, max_epochs, or a stop once min_epochs is met).
  bool Done();
  absl::Status End(LightningModule& model);

  LoopContext& context_;
  EpochProgress epoch_progress_;
  TrainingEpochLoop epoch_loop_;
  int64_t max_epochs_ = 0;
  int64_t num_training_batches_ = 0;
  bool sanity_checking_ = false;
  bool should_stop_ = false;
  std::shared_ptr<DataLoader> train_loader_;
  std::vector<std::shared_ptr<DataLoader>> val_loaders_;
  TrainingLimits limits_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_FIT_LOOP_H_
