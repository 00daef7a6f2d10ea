#include "trainer/loops/preflight.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/core/closest_name.h"

namespace kiln {

bool ReadBeforeValidation(const PreflightPlan& plan, const MonitoredMetric& monitor) {
  return monitor.strict && monitor.every_n_train_steps > 0 && monitor.every_n_train_steps < plan.first_validation_step;
}

absl::Status CheckMonitors(const PreflightPlan& plan, const std::vector<MonitoredMetric>& monitors) {
  for (const MonitoredMetric& monitor : monitors) {
    if (!monitor.strict || monitor.name.empty()) continue;
    const bool logged_by_validation = plan.validation_metrics.count(monitor.name) > 0;
    if (!plan.declared_metrics.empty() && plan.declared_metrics.count(monitor.name) == 0 && !logged_by_validation) {
      std::set<std::string> known = plan.declared_metrics;
      known.insert(plan.validation_metrics.begin(), plan.validation_metrics.end());
      const std::string closest = ClosestName(monitor.name, {known.begin(), known.end()});
      return absl::InvalidArgumentError(absl::StrCat(
          monitor.option, " monitors '", monitor.name, "', which this run never logs: the module logs ",
          absl::StrJoin(known, ", "), " (its logged_metric_names())",
          closest.empty() ? "" : absl::StrCat("; did you mean '", closest, "'?"),
          "; monitor one of them, or log it and declare it"));
    }
    // Without a dry step nothing says what validation logs; a name that says it is a validation metric is taken at
    // its word (Lightning's own examples name them val_*).
    const bool named_for_validation =
        !plan.dry_step_ran && (absl::StartsWith(monitor.name, "val_") || absl::StartsWith(monitor.name, "val/"));
    if (!logged_by_validation && !named_for_validation) continue;
    const std::string what = logged_by_validation ? "which validation logs" : "a validation metric by its name";
    if (!plan.validation_never_runs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          monitor.option, " monitors '", monitor.name, "', ", what, ", but no validation runs in this fit: ",
          plan.validation_never_runs, "; or monitor a metric training logs"));
    }
    if (ReadBeforeValidation(plan, monitor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          monitor.option, " reads '", monitor.name, "', ", what, ", every ", monitor.every_n_train_steps,
          " optimizer step(s) from step ", monitor.every_n_train_steps, ", but validation first logs it after step ",
          plan.first_validation_step, "; read it at epoch ends (every_n_train_steps=0, or a scheduler's "
          "interval='epoch'), or validate at least every ", monitor.every_n_train_steps,
          " batch(es) (val_check_interval)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMilestones(const PreflightPlan& plan, const std::vector<ScheduledMilestone>& milestones) {
  for (const ScheduledMilestone& milestone : milestones) {
    const int64_t length = milestone.per_step ? plan.run_steps : plan.run_epochs;
    if (length < 0) continue;
    // The schedule steps at every frequency-th epoch end or optimizer step. A milestone at the run's very end is
    // reached (its rate is what the last checkpoint holds, for a longer run resumed from it); one after it never is.
    const int64_t reached = milestone.step * milestone.frequency;
    if (reached <= length) continue;
    const char* unit = milestone.per_step ? "optimizer step(s)" : "epoch(s)";
    return absl::InvalidArgumentError(absl::StrCat(
        milestone.setting, ", stepped every ", milestone.frequency, " ",
        milestone.per_step ? "optimizer step (interval='step')" : "epoch (interval='epoch')", ", changes the rate after ",
        reached, " ", unit, ", but this fit trains ", length, " ",
        unit, " (", milestone.per_step ? plan.run_steps_bound : plan.run_epochs_bound,
        "): the run ends before the schedule gets there; set it to at most ", length / milestone.frequency,
        ", or train longer"));
  }
  return absl::OkStatus();
}

}  // namespace kiln
