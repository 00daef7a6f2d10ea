#include "trainer/loops/preflight.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kiln {

bool ReadBeforeValidation(const PreflightPlan& plan, const MonitoredMetric& monitor) {
  return monitor.strict && monitor.every_n_train_steps > 0 && monitor.every_n_train_steps < plan.first_validation_step;
}

absl::Status CheckMonitors(const PreflightPlan& plan, const std::vector<MonitoredMetric>& monitors) {
  for (const MonitoredMetric& monitor : monitors) {
    if (!monitor.strict || monitor.name.empty()) continue;
    const bool logged_by_validation = plan.validation_metrics.count(monitor.name) > 0;
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

}  // namespace kiln
