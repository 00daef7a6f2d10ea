#include "trainer/report/html_report.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "trainer/report/metric_charts.h"
#include "trainer/report/svg_chart.h"

namespace kiln {
namespace {

constexpr char kStyle[] = R"(
body { font-family: sans-serif; margin: 24px; color: #222; background: #fafafa; }
h1 { font-size: 22px; margin-bottom: 4px; overflow-wrap: anywhere; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.status { color: #555; margin-top: 0; }
.note { color: #555; font-size: 13px; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.chart { border: 1px solid #ddd; background: #fff; }
table { border-collapse: collapse; background: #fff; }
td, th { border: 1px solid #ddd; padding: 3px 10px; text-align: left; font-size: 13px; vertical-align: top; }
td.value { font-family: monospace; white-space: pre-wrap; overflow-wrap: anywhere; }
#summary { max-width: 100%; }
.tables { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
pre { background: #fff; border: 1px solid #ddd; padding: 8px; font-size: 12px; }
)";

// ThroughputMonitor's keys (trainer/callbacks/throughput_monitor.h) that get no chart: every stage's running totals
// (straight lines), and the evaluation stages' rates, whose rows sit at their batch's number within a run, not at a
// global step. Training's rates are charted over the global step.
bool UnchartedThroughput(absl::string_view metric) {
  static constexpr absl::string_view kTotals[] = {"time", "batches", "samples", "lengths"};
  static constexpr absl::string_view kRates[] = {"batches_per_sec",        "samples_per_sec",
                                                 "items_per_sec",          "flops_per_sec",
                                                 "device/batches_per_sec", "device/samples_per_sec",
                                                 "device/items_per_sec",   "device/flops_per_sec",
                                                 "device/mfu"};
  for (absl::string_view stage : {"train/", "validate/", "test/", "predict/"}) {
    absl::string_view key = metric;
    if (!absl::ConsumePrefix(&key, stage)) continue;
    for (absl::string_view total : kTotals) {
      if (key == total) return true;
    }
    if (stage == "train/") return false;
    for (absl::string_view rate : kRates) {
      if (key == rate) return true;
    }
  }
  return false;
}

bool Charted(const std::string& metric) {
  return metric != "epoch" && !absl::StartsWith(metric, "DeviceStatsMonitor.") && !UnchartedThroughput(metric);
}

// One series per name, points in the order logged, series in the order first logged.
template <typename X>
std::vector<ChartSeries> SeriesOf(const std::vector<std::pair<X, std::map<std::string, double>>>& rows) {
  std::vector<ChartSeries> series;
  std::map<std::string, size_t> index;
  for (const auto& [x, values] : rows) {
    for (const auto& [name, value] : values) {
      if (!Charted(name)) continue;
      auto [at, added] = index.emplace(name, series.size());
      if (added) series.push_back({name, {}});
      series[at->second].points.emplace_back(static_cast<double>(x), value);
    }
  }
  return series;
}

std::string Table(const ReportTable& table) {
  std::string out = absl::StrCat("<table id=\"", EscapeHtml(table.id), "\">\n");
  for (const auto& [key, value] : table.rows) {
    absl::StrAppend(&out, "<tr><th>", EscapeHtml(key), "</th><td class=\"value\">", EscapeHtml(value), "</td></tr>\n");
  }
  return out + "</table>\n";
}

// The charts of `plan`, then the table of what has none. `where` writes an x for "logged once, at ...".
std::string Charts(const ChartPlan& plan, const std::string& x_label, const std::string& uncharted_id,
                   std::string (*where)(double)) {
  std::string out = "<div class=\"charts\">\n";
  for (const MetricChart& chart : plan.charts) {
    absl::StrAppend(&out, LineChartSvg(chart.series, {.title = chart.name, .x_label = x_label, .y_label = chart.name}));
  }
  absl::StrAppend(&out, "</div>\n");
  if (plan.uncharted.empty()) return out;
  absl::StrAppend(&out, "<h3>Not charted</h3>\n<table id=\"", uncharted_id, "\">\n",
                  "<tr><th>name</th><th>value</th><th>why</th></tr>\n");
  for (const UnchartedMetric& metric : plan.uncharted) {
    std::string why;
    const char* key = "";
    switch (metric.why) {
      case UnchartedMetric::Why::kConstant:
        key = "constant";
        why = absl::StrCat("constant: the same in all ", metric.count, " values");
        break;
      case UnchartedMetric::Why::kLoggedOnce:
        key = "once";
        why = metric.count == 1 ? absl::StrCat("logged once, ", where(metric.x))
                                : absl::StrCat("one finite value of ", metric.count, ", ", where(metric.x));
        break;
      case UnchartedMetric::Why::kNotFinite:
        key = "not-finite";
        why = absl::StrCat("no finite value in ", metric.count);
        break;
    }
    absl::StrAppend(&out, "<tr data-metric=\"", EscapeHtml(metric.name), "\" data-why=\"", key, "\"><th>",
                    EscapeHtml(metric.name), "</th><td class=\"value\">", absl::StrFormat("%.6g", metric.value),
                    "</td><td>", EscapeHtml(why), "</td></tr>\n");
  }
  return out + "</table>\n";
}

}  // namespace

std::string RenderHtmlReport(const ReportData& data) {
  std::string html = absl::StrCat("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>",
                                  EscapeHtml(data.title), "</title>\n<style>", kStyle, "</style>\n</head>\n<body>\n");
  absl::StrAppend(&html, "<h1>", EscapeHtml(data.title), "</h1>\n<p class=\"status\" id=\"status\">",
                  EscapeHtml(data.status), "</p>\n");
  if (!data.summary.rows.empty()) absl::StrAppend(&html, Table(data.summary));

  const ChartPlan metrics = PlanCharts(SeriesOf(data.metric_rows), /*share=*/true);
  absl::StrAppend(&html, "<section id=\"metrics\">\n<h2>Metrics</h2>\n");
  if (metrics.charts.empty() && metrics.uncharted.empty()) {
    absl::StrAppend(&html, "<p>No metrics were logged.</p>\n");
  } else if (!metrics.charts.empty()) {
    absl::StrAppend(&html,
                    "<p class=\"note\">x is the global step. Train, validation and test values of one quantity share "
                    "a chart; validation and epoch means sit at the step they were logged at, the last of their "
                    "epoch.</p>\n");
  }
  absl::StrAppend(
      &html,
      Charts(metrics, "step", "uncharted-metrics", [](double step) { return absl::StrFormat("at step %.0f", step); }),
      "</section>\n");

  const ChartPlan device = PlanCharts(SeriesOf(data.device_stats), /*share=*/false);
  absl::StrAppend(&html, "<section id=\"device-stats\">\n<h2>Device statistics (", EscapeHtml(data.device), ")</h2>\n");
  if (device.charts.empty() && device.uncharted.empty()) {
    absl::StrAppend(&html, "<p>No device statistics were recorded.</p>\n");
  }
  absl::StrAppend(&html,
                  Charts(device, "seconds since fit started", "uncharted-device-stats",
                         [](double seconds) { return absl::StrFormat("at %.2f s", seconds); }),
                  "</section>\n");

  absl::StrAppend(&html, "<section id=\"tables\">\n<div class=\"tables\">\n");
  for (const ReportTable& table : data.tables) {
    absl::StrAppend(&html, "<div>\n<h2>", EscapeHtml(table.title), "</h2>\n", Table(table), "</div>\n");
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
