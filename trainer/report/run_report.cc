#include "trainer/report/run_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "trainer/io/durable_file.h"
#include "trainer/models/model_summary.h"
#include "trainer/trainer.h"

namespace kiln {

RunReport::RunReport(std::shared_ptr<const MemoryLogger> metrics, RunReportOptions options)
    : metrics_(std::move(metrics)), options_(std::move(options)) {}

void RunReport::on_fit_start(Trainer& trainer, LightningModule& module) {
  start_ = absl::Now();
  const Plan& plan = *trainer.plan();
  std::vector<std::string> devices;
  for (const LogicalDevice& device : plan.logical_devices()) devices.push_back(device.ToString());
  device_ = plan.root_logical_device().ToString();
  plan_.rows = {
      {"accelerator", plan.accelerator->name()},
      {"devices", absl::StrJoin(devices, ", ")},
      {"strategy", plan.strategy},
      {"precision", std::string(PrecisionName(plan.precision))},
      {"num_nodes", absl::StrCat(plan.num_nodes)},
      {"world_size", absl::StrCat(plan.world_size)},
      {"cluster_environment", plan.cluster_environment},
      {"process_group_backend", plan.process_group_backend.value_or("none")},
  };
  model_summary_ = Summarize(module).ToString();
  Sample(trainer);
}

void RunReport::on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs,
                                   const Batch& batch, int64_t batch_idx) {
  if (options_.every_n_steps > 0 && trainer.global_step() % options_.every_n_steps == 0 &&
      trainer.global_step() != last_sampled_step_) {
    Sample(trainer);
  }
}

void RunReport::on_train_epoch_end(Trainer& trainer, LightningModule& module) { Sample(trainer); }

void RunReport::Sample(Trainer& trainer) {
  last_sampled_step_ = trainer.global_step();
  absl::StatusOr<DeviceStats> stats =
      trainer.plan()->accelerator->GetDeviceStats(trainer.plan()->root_logical_device());
  if (!stats.ok()) {
    LOG_FIRST_N(WARNING, 1) << "run report: no device statistics: " << stats.status();
    return;
  }
  device_stats_.emplace_back(absl::ToDoubleSeconds(absl::Now() - start_),
                             std::map<std::string, double>(stats->begin(), stats->end()));
}

ReportData RunReport::Data(const std::string& status, ReportTable summary, std::vector<ReportTable> tables) const {
  ReportData data;
  data.title = options_.title;
  data.status = status;
  data.summary = std::move(summary);
  data.tables.push_back(plan_);
  for (ReportTable& table : tables) data.tables.push_back(std::move(table));
  ReportTable hparams{"hparams", "Hyper-parameters", {}};
  for (const auto& [key, value] : metrics_->hyperparams()) hparams.rows.emplace_back(key, value);
  data.tables.push_back(std::move(hparams));
  data.model_summary = model_summary_;
  for (const MemoryLogger::Row& row : metrics_->rows()) data.metric_rows.emplace_back(row.step, row.metrics);
  data.device = device_;
  data.device_stats = device_stats_;
  data.lr_find = lr_find_;
  data.lr_find_suggestion = lr_find_suggestion_;
  return data;
}

absl::Status RunReport::Write(const std::string& path, const std::string& status, ReportTable summary,
                              std::vector<ReportTable> tables) const {
  return WriteFileDurably(path, RenderHtmlReport(Data(status, std::move(summary), std::move(tables))));
}

}  // namespace kiln
