// Fit's check of its plan before the run folder exists (Lightning raises the same mistakes only when a monitored key
// is first missing, after the logs have been opened): every metric a callback or a scheduler monitors is checked
// against the metrics the module declares, the validation schedule and what a dry validation step logs, and every
// schedule's milestones against the run's length. A plan that can never work stops fit
// with one error naming the option and the fix, before any folder or file is made. Internal to //trainer.
//
// Thread-safety: pure.
#ifndef KILN_TRAINER_LOOPS_PREFLIGHT_H_
#define KILN_TRAINER_LOOPS_PREFLIGHT_H_

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainer/core/callback.h"

namespace kiln {

// What fit will do, as far as the monitors care.
struct PreflightPlan {
  // Whether a dry validation step ran (there is validation data, and a check needed it).
  bool dry_step_ran = false;
  // Why no validation runs in this fit, in the option's words with its fix ("limit_val_batches is 0: set it above
  // 0"); "" when validation runs at least once.
  std::string validation_never_runs;
  // The metrics one validation step logs (a dry step on each validation loader's first batch).
  std::set<std::string> validation_metrics;
  // The optimizer step after which validation first logs; max() when never or unknown (a stream, a resumed run).
  int64_t first_validation_step = std::numeric_limits<int64_t>::max();
  // The metrics the module declares it logs (LightningModule::logged_metric_names()); empty when it declares none.
  std::set<std::string> declared_metrics;
  // How long the whole run is (a resumed run included), in epochs and in optimizer steps, with what bounds each
  // ("max_epochs=5"); -1 when nothing bounds it or it is not known (a stream).
  int64_t run_epochs = -1;
  std::string run_epochs_bound;
  int64_t run_steps = -1;
  std::string run_steps_bound;
};

// A point where a learning-rate schedule changes course (kiln::LRScheduler::milestones()), where fit steps it.
struct ScheduledMilestone {
  std::string setting;  // "StepLR(step_size=10)".
  int64_t step = 0;     // After this many steps of the schedule.
  bool per_step = false;  // Stepped after optimizer steps (interval='step'), or at epochs' ends.
  int64_t frequency = 1;
};

// OK, or InvalidArgument for the first monitor that can never be read where it is read: a name the run never logs
// (when the module declares its metrics: neither declared nor logged by the dry step; with the closest one), a metric
// validation logs (by the dry step, or by its "val_" name when no dry step could run) while validation never runs,
// or one read every N optimizer steps from step N while validation first logs it after a later step. Lenient
// monitors (strict = false) are not refused.
absl::Status CheckMonitors(const PreflightPlan& plan, const std::vector<MonitoredMetric>& monitors);

// OK, or InvalidArgument for the first milestone the run ends before (a StepLR whose first decay would come after
// the last epoch, a warm-up longer than the run): a schedule that never does what it was set to do.
// Milestones of a run whose length is not known are not checked.
absl::Status CheckMilestones(const PreflightPlan& plan, const std::vector<ScheduledMilestone>& milestones);

// Whether `monitor` is strict and read every N optimizer steps from step N, before validation first logs: a check
// CheckMonitors makes, and one of the two that need a dry validation step to know what validation logs.
bool ReadBeforeValidation(const PreflightPlan& plan, const MonitoredMetric& monitor);

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_PREFLIGHT_H_
