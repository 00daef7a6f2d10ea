// The run report: one self-contained HTML file per run (report.html) that any browser opens from disk, with no
// server, script or network: the run's summary first, then metric curves and device statistics over time as inline
// SVG (svg_chart.h), and tables for the resolved plan, the final metrics and the hyper-parameters, and the model
// summary. Every text that comes from the run (metric names, the command line, paths, values) is HTML-escaped.
//
// Layout, for people and for tests:
//   <table id="summary">            ReportData::summary, under the title and status (fit: the command line, the
//                                   run folder, the last and best checkpoints, ...).
//   <section id="metrics">          one chart per quantity (metric_charts.h): train_loss_step, train_loss_epoch
//                                   and val_loss share the chart "loss". x is the global step, and every value sits
//                                   at the step it was logged at, so validation and epoch means fall on the last
//                                   step of their epoch. Columns `epoch` and DeviceStatsMonitor's are left out.
//                                   ThroughputMonitor's training rates (train/device/samples_per_sec,
//                                   train/device/mfu, ...) are charted over the global step, one chart each
//                                   ("device/samples_per_sec"); its totals (train/time, train/samples, ...) and
//                                   the other stages' rows (validate/..., whose step is a batch's number within one
//                                   validation) are left out.
//     <table id="uncharted-metrics">  the metrics without a chart (constant, logged once, never finite), with their
//                                   value; one <tr data-metric="<name>" data-why="constant|once|not-finite"> each.
//   <section id="device-stats">     one chart per statistic the accelerator reported; x is seconds since fit
//                                   started. <table id="uncharted-device-stats"> as above (e.g. the CPU count).
//   <table id="<table id>">         for each of ReportData::tables.
//   <pre id="model-summary">        the model summary.
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
  std::string status;   // One line: how the run ended.
  ReportTable summary;  // At the top; left out when it has no rows.
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
