// The loops' progress counters, each owned by the loop that counts it, as Lightning's loops own theirs
// (loops/progress.py: fit_loop.epoch_progress, epoch_loop.batch_progress, the optimization's optim_progress,
// epoch_loop.scheduler_progress, val_loop.batch_progress). Others read them through the owner (FitLoop,
// TrainingEpochLoop, EvaluationLoop); Trainer::current_epoch(), global_step() and the rest read them there, and a
// checkpoint's "loops" entry is written from them and restored into them (FitLoop::state_dict, load_state_dict).
// Plain values: not thread-safe, like the loops. Internal to //trainer.
#ifndef KILN_TRAINER_LOOPS_PROGRESS_H_
#define KILN_TRAINER_LOOPS_PROGRESS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

// The fit loop's epochs (Lightning's fit_loop.epoch_progress).
struct EpochProgress {
  // The epoch running (Trainer::current_epoch()); after fit, the one after the last run.
  int64_t current = 0;
  // The epoch a checkpoint written now resumes in: `current` until the epoch's last batch and its epoch-interval
  // schedulers are done, then the next one.
  int64_t resume = 0;
};

// The training epoch loop's batches (Lightning's epoch_loop.batch_progress).
struct BatchProgress {
  int64_t total_started = 0;  // Training batches started, all epochs.
  int64_t started = 0;        // Batches of the current epoch run so far (kept after the epoch ends).
  int64_t completed = 0;      // Batches of the current epoch whose on_train_batch_end has returned.
  int64_t resume = 0;         // Where a checkpoint written now resumes, within EpochProgress::resume.
};

// Optimizer steps (Lightning's optimization's optim_progress), whichever optimization (automatic or manual) steps.
struct OptimizerProgress {
  int64_t total = 0;     // Trainer::global_step().
  int64_t in_epoch = 0;  // In the current epoch.
};

// The learning-rate schedulers' steps (Lightning's epoch_loop.scheduler_progress).
struct SchedulerProgress {
  std::vector<int64_t> total;  // Each of configure_optimizers' schedulers', in order, all epochs.
  int64_t in_epoch = 0;        // Every scheduler's, in the current epoch.

  // Scheduler `index` stepped once.
  void Increment(size_t index) {
    ++total[index];
    ++in_epoch;
  }
};

// The validation loop's batches inside fit (Lightning's val_loop.batch_progress).
struct EvaluationProgress {
  int64_t in_epoch = 0;  // Validation batches run in the current training epoch.
  int64_t last_run = 0;  // Validation batches of the last validation run.
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_PROGRESS_H_
