// The run report: one self-contained HTML file per run (report.html) that any browser opens from disk, with no
// server, script or network: metric curves and device statistics over time as inline SVG (svg_chart.h), and
// tables for the resolved plan, the run's summary, the final metrics and the hyper-parameters, and the model
// summary.
//
// Layout, for people and for tests:
//   <section id="metrics">       one chart per metric, where `<name>_step` and `<name>_epoch` share the chart of
//                                <name>; x is the global step. Columns `epoch` and DeviceStatsMonitor's are left
//                                out.
//   <section id="device-stats">  one chart per statistic the accelerator reported; x is seconds since fit started.
//   <table id="<table id>">      for each ReportTable.
//   <pre id="model-summary">     the model summary.
#ifndef KILN_TRAINER_REPORT_HTML_REPORT_H_
#define KILN_TRAINER_REPORT_HTML_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

struct ReportTable {
  std::string id;     // HTML id, e.g. "plan".
  std::string title;  // Heading, e.g. "Plan".
  std::vector<std::pair<std::string, std::string>> rows;
};

struct ReportData {
  std::string title;
  std::string status;  // One line: how the run ended.
  std::vector<ReportTable> tables;
  std::string model_summary;
  // Rows as the trainer logged them: (step, metric name -> value).
  std::vector<std::pair<int64_t, std::map<std::string, double>>> metric_rows;
  // Device statistics over time: (seconds since fit started, statistic -> value).
  std::string device;  // e.g. "cpu".
  std::vector<std::pair<double, std::map<std::string, double>>> device_stats;
};

std::string RenderHtmlReport(const ReportData& data);

}  // namespace kiln

#endif  // KILN_TRAINER_REPORT_HTML_REPORT_H_
