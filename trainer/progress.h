// Progress for people: a one-line bar redrawn in place when standard error is a terminal (epoch, batches done,
// [elapsed<time left, rate], global step, and the metrics logged with prog_bar, named as the logs name them), and a
// glog line per epoch (and every `log_every_n_steps` steps) when it is not. The bar fits the terminal's width, read
// again at every redraw (so a resized window gets a bar of its new width): the bar itself shrinks first, then the
// metrics are cut, so that the line never wraps. Validation and the sanity check draw a bar of their own while they
// run ("Validation", "Sanity Checking"), which goes away when they end, as Lightning's does.
#ifndef KILN_TRAINER_PROGRESS_H_
#define KILN_TRAINER_PROGRESS_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "trainer/core/metrics.h"

namespace kiln {

class ProgressReporter {
 public:
  ProgressReporter(bool enabled, int64_t log_every_n_steps);

  // `num_batches` < 0: a stream of unknown length (no bar, no time left).
  void StartEpoch(int64_t epoch, int64_t max_epochs, int64_t num_batches);
  // Called after each training batch; `metrics` gives the metrics logged with prog_bar, and is only called when a
  // line is drawn (reading metrics costs a device sync).
  void Step(int64_t batch_idx, int64_t global_step, absl::FunctionRef<MetricMap()> metrics);
  void EndEpoch(int64_t epoch, const MetricMap& metrics);
  // An evaluation inside fit (validation, the sanity check): `what` names it on its bar.
  void StartEvaluation(const char* what, int64_t num_batches);
  void EvaluationStep(int64_t batch_idx);
  void EndEvaluation();

  // The line for a bar, fitted to `width` columns (exposed for tests).
  static std::string FitLine(const std::string& head, int64_t done, int64_t total, const std::string& tail,
                             const std::string& metrics, int width);

 private:
  const bool enabled_;
  const bool terminal_;
  const int64_t log_every_n_steps_;
  int64_t epoch_ = 0;
  int64_t max_epochs_ = 0;
  int64_t num_batches_ = 0;
  int64_t batches_seen_ = 0;  // This epoch's batches so far: a stream's count, said when it ends.
  absl::Time epoch_start_;
  absl::Time last_draw_;
  const char* evaluation_ = nullptr;  // While an evaluation runs: its name.
  int64_t evaluation_batches_ = 0;
  absl::Time evaluation_start_;
  absl::Time last_evaluation_draw_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_PROGRESS_H_
