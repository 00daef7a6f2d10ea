// RunReport: a callback that gathers what the run report (html_report.h) shows while fit runs, and writes
// report.html when asked.
//
// It records the resolved plan, the hyper-parameters and the model summary when fit starts, and samples the
// accelerator's device statistics (Accelerator::GetDeviceStats of this process's device) when fit starts, every
// `every_n_steps` optimizer steps and at the end of every epoch. The metric curves come from a MemoryLogger that
// the caller also puts among the trainer's loggers, so the report shows exactly what the loggers got.
//
// Write() may be called after fit returns, whether fit succeeded or failed. Thread-safety: loop thread only.
#ifndef KILN_TRAINER_REPORT_RUN_REPORT_H_
#define KILN_TRAINER_REPORT_RUN_REPORT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainer/core/callback.h"
#include "trainer/core/logger.h"
#include "trainer/report/html_report.h"

namespace kiln {

struct RunReportOptions {
  std::string title = "Kiln run";
  int64_t every_n_steps = 50;  // Device statistics every N steps (and at epoch ends); <= 0: epoch ends only.
};

class RunReport final : public Callback {
 public:
  RunReport(std::shared_ptr<const MemoryLogger> metrics, RunReportOptions options);

  std::string state_key() const override { return "RunReport"; }
  void on_fit_start(Trainer& trainer, LightningModule& module) override;
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, LightningModule& module) override;

  // The page's title; the run's folder is only known once the run has claimed it.
  void set_title(std::string title) { options_.title = std::move(title); }
  // The learning-rate range test run before fit (fit's --auto_lr_find): drawn in its own section.
  void set_lr_find(std::vector<std::pair<double, double>> points, std::optional<double> suggestion) {
    lr_find_ = std::move(points);
    lr_find_suggestion_ = suggestion;
  }

  // Writes report.html to `path` (atomically). `status`: one line on how the run ended; `summary` is shown at the
  // top (fit: report_summary.h) and `tables` after the plan (e.g. the final metrics), then the hyper-parameters.
  absl::Status Write(const std::string& path, const std::string& status, ReportTable summary,
                     std::vector<ReportTable> tables) const;

  // What Write would render (for tests).
  ReportData Data(const std::string& status, ReportTable summary, std::vector<ReportTable> tables) const;

 private:
  void Sample(Trainer& trainer);

  std::shared_ptr<const MemoryLogger> metrics_;
  RunReportOptions options_;
  absl::Time start_;
  int64_t last_sampled_step_ = -1;
  ReportTable plan_{"plan", "Plan", {}};
  std::string device_;
  std::string model_summary_;
  std::vector<std::pair<double, std::map<std::string, double>>> device_stats_;
  std::vector<std::pair<double, double>> lr_find_;
  std::optional<double> lr_find_suggestion_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_REPORT_RUN_REPORT_H_
