#include "trainer/report/html_report.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "trainer/report/svg_chart.h"

namespace kiln {
namespace {

constexpr char kStyle[] = R"(
body { font-family: sans-serif; margin: 24px; color: #222; background: #fafafa; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.status { color: #555; margin-top: 0; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.chart { border: 1px solid #ddd; background: #fff; }
table { border-collapse: collapse; background: #fff; }
td, th { border: 1px solid #ddd; padding: 3px 10px; text-align: left; font-size: 13px; }
td.value { font-family: monospace; }
.tables { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
pre { background: #fff; border: 1px solid #ddd; padding: 8px; font-size: 12px; }
)";

// "train_loss_step" and "train_loss_epoch" both chart under "train_loss".
std::string ChartName(absl::string_view metric) {
  if (absl::ConsumeSuffix(&metric, "_step") || absl::ConsumeSuffix(&metric, "_epoch")) return std::string(metric);
  return std::string(metric);
}

bool Charted(const std::string& metric) {
  return metric != "epoch" && !absl::StartsWith(metric, "DeviceStatsMonitor.");
}

std::string Charts(const std::map<std::string, std::vector<ChartSeries>>& charts, const std::string& x_label) {
  std::string out = "<div class=\"charts\">\n";
  for (const auto& [name, series] : charts) {
    absl::StrAppend(&out, LineChartSvg(series, {.title = name, .x_label = x_label}));
  }
  return out + "</div>\n";
}

}  // namespace

std::string RenderHtmlReport(const ReportData& data) {
  std::string html = absl::StrCat("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>",
                                  EscapeHtml(data.title), "</title>\n<style>", kStyle, "</style>\n</head>\n<body>\n");
  absl::StrAppend(&html, "<h1>", EscapeHtml(data.title), "</h1>\n<p class=\"status\" id=\"status\">",
                  EscapeHtml(data.status), "</p>\n");

  // Metric curves: series in first-logged order within each chart.
  std::map<std::string, std::vector<ChartSeries>> metric_charts;
  std::map<std::string, std::pair<std::string, size_t>> where;  // metric -> (chart, series index)
  for (const auto& [step, metrics] : data.metric_rows) {
    for (const auto& [name, value] : metrics) {
      if (!Charted(name)) continue;
      auto found = where.find(name);
      if (found == where.end()) {
        const std::string chart = ChartName(name);
        metric_charts[chart].push_back({name, {}});
        found = where.emplace(name, std::make_pair(chart, metric_charts[chart].size() - 1)).first;
      }
      metric_charts[found->second.first][found->second.second].points.emplace_back(static_cast<double>(step), value);
    }
  }
  absl::StrAppend(&html, "<section id=\"metrics\">\n<h2>Metrics</h2>\n");
  if (metric_charts.empty()) absl::StrAppend(&html, "<p>No metrics were logged.</p>\n");
  absl::StrAppend(&html, Charts(metric_charts, "step"), "</section>\n");

  std::map<std::string, std::vector<ChartSeries>> device_charts;
  for (const auto& [seconds, stats] : data.device_stats) {
    for (const auto& [key, value] : stats) {
      std::vector<ChartSeries>& series = device_charts[key];
      if (series.empty()) series.push_back({key, {}});
      series[0].points.emplace_back(seconds, value);
    }
  }
  absl::StrAppend(&html, "<section id=\"device-stats\">\n<h2>Device statistics (", EscapeHtml(data.device), ")</h2>\n");
  if (device_charts.empty()) absl::StrAppend(&html, "<p>No device statistics were recorded.</p>\n");
  absl::StrAppend(&html, Charts(device_charts, "seconds"), "</section>\n");

  absl::StrAppend(&html, "<section id=\"tables\">\n<div class=\"tables\">\n");
  for (const ReportTable& table : data.tables) {
    absl::StrAppend(&html, "<div>\n<h2>", EscapeHtml(table.title), "</h2>\n<table id=\"", EscapeHtml(table.id),
                    "\">\n");
    for (const auto& [key, value] : table.rows) {
      absl::StrAppend(&html, "<tr><th>", EscapeHtml(key), "</th><td class=\"value\">", EscapeHtml(value),
                      "</td></tr>\n");
    }
    absl::StrAppend(&html, "</table>\n</div>\n");
  }
  absl::StrAppend(&html, "</div>\n</section>\n");
  if (!data.model_summary.empty()) {
    absl::StrAppend(&html, "<section>\n<h2>Model</h2>\n<pre id=\"model-summary\">", EscapeHtml(data.model_summary),
                    "</pre>\n</section>\n");
  }
  absl::StrAppend(&html, "</body>\n</html>\n");
  return html;
}

}  // namespace kiln
