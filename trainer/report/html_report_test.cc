#include "trainer/report/html_report.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trainer/classifier.h"
#include "trainer/report/axis_ticks.h"
#include "trainer/report/run_report.h"
#include "trainer/report/svg_chart.h"
#include "trainer/synthetic_data.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

// data-points of the path of series `name`, or -1.
int PointsOf(const std::string& html, const std::string& name) {
  std::smatch match;
  const std::regex pattern("data-series=\"" + name + "\" data-points=\"([0-9]+)\" d=\"([^\"]*)\"");
  if (!std::regex_search(html, match, pattern)) return -1;
  // The count must agree with the vertices in the path itself.
  const std::string d = match[2];
  const int vertices = static_cast<int>(std::count(d.begin(), d.end(), 'M') + std::count(d.begin(), d.end(), 'L'));
  EXPECT_EQ(vertices, std::stoi(match[1])) << name;
  return vertices;
}

int Count(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// The text of every <text class="..."> element whose class contains `cls`, in order.
std::vector<std::string> Texts(const std::string& svg, const std::string& cls) {
  std::vector<std::string> texts;
  const std::regex pattern("<text[^>]*class=\"[^\"]*" + cls + "[^\"]*\"[^>]*>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), pattern); it != std::sregex_iterator(); ++it) {
    texts.push_back((*it)[1]);
  }
  return texts;
}

TEST(SvgChartTest, OneVertexPerFinitePoint) {
  const std::string svg = LineChartSvg({{"a", {{0, 1}, {1, 2}, {2, NAN}, {3, 0.5}}}, {"b<&>", {{0, 3}}}, {"empty", {}}},
                                       {.title = "t & u", .x_label = "step", .y_label = "v"});
  EXPECT_EQ(PointsOf(svg, "a"), 3);
  EXPECT_EQ(PointsOf(svg, "b&lt;&amp;&gt;"), 1);
  EXPECT_EQ(PointsOf(svg, "empty"), 0);
  // Few points: a dot on each (3 for "a", and the single point of "b<&>").
  EXPECT_EQ(Count(svg, "<circle class=\"marker\""), 4);
  EXPECT_EQ(Count(svg, "r=\"3.5\""), 1);
  EXPECT_NE(svg.find(">t &amp; u</text>"), std::string::npos);
  EXPECT_EQ(Texts(svg, "legend"), (std::vector<std::string>{"a", "b&lt;&amp;&gt;", "empty"}));
}

TEST(SvgChartTest, RoundTicksGridAndAxisTitles) {
  // y from 0.5 to 3 is padded by nothing and extended to the ticks (axis_ticks.h): step 0.5, 0.5 to 3.0; x spans
  // the data, 0 to 3, with ticks at 0.5 steps inside it.
  const std::string svg = LineChartSvg({{"loss", {{0, 1}, {1, 2}, {3, 0.5}, {2, 3}}}},
                                       {.title = "loss", .x_label = "step", .y_label = "loss"});
  const AxisTicks y = NiceTicks(0.5, 3, true);
  const AxisTicks x = NiceTicks(0, 3, false);
  EXPECT_EQ(Texts(svg, "y-tick"), y.labels);
  EXPECT_EQ(Texts(svg, "x-tick"), x.labels);
  EXPECT_EQ(Texts(svg, "y-tick"), (std::vector<std::string>{"0.5", "1.0", "1.5", "2.0", "2.5", "3.0"}));
  EXPECT_EQ(Count(svg, "class=\"grid\""), static_cast<int>(y.values.size() + x.values.size()));
  EXPECT_EQ(Texts(svg, "x-title"), (std::vector<std::string>{"step"}));
  EXPECT_EQ(Texts(svg, "y-title"), (std::vector<std::string>{"loss"}));
  // One series named like its axis: no legend.
  EXPECT_TRUE(Texts(svg, "legend").empty());
}

TEST(SvgChartTest, FlatNoisyCurveIsNotACliff) {
  // 0.1% of noise around 24 GB: the curve stays in the middle of the chart, not from its top to its bottom.
  const std::string svg = LineChartSvg({{"memory", {{0, 2.4287e10}, {1, 2.4288e10}, {2, 2.42875e10}}}},
                                       {.title = "memory", .x_label = "seconds", .y_label = "memory", .height = 290});
  std::smatch match;
  ASSERT_TRUE(std::regex_search(svg, match, std::regex("d=\"M [0-9.]+ ([0-9.]+) L [0-9.]+ ([0-9.]+)")));
  const double spread = std::abs(std::stod(match[1]) - std::stod(match[2]));
  const double plot_height = 290 - 30 - 44;  // svg_chart.cc's margins.
  EXPECT_LT(spread, plot_height * 0.05);
  EXPECT_EQ(Texts(svg, "y-tick"), (std::vector<std::string>{"23.5G", "24.0G", "24.5G", "25.0G"}));
}

TEST(HtmlReportTest, GroupsTrainAndValidationCurvesAndIsSelfContained) {
  ReportData data;
  data.title = "run <1>";
  data.status = "finished";
  data.summary = {"summary", "Summary", {{"command", "fit --max_epochs=2"}}};
  data.tables = {{"plan", "Plan", {{"accelerator", "cpu"}}}};
  data.metric_rows = {{50, {{"train_loss_step", 1.0}, {"epoch", 0}, {"lr", 0.01}}},
                      {64, {{"val_loss", 0.9}, {"val_acc", 0.5}}},
                      {64, {{"train_loss_epoch", 0.95}, {"epoch", 0}}},
                      {100, {{"train_loss_step", 0.7}, {"epoch", 1}, {"DeviceStatsMonitor.x/y", 3}, {"lr", 0.01}}},
                      {128, {{"val_loss", 0.6}, {"val_acc", 0.8}}},
                      {128, {{"train_loss_epoch", 0.65}, {"epoch", 1}}}};
  data.device = "cpu cpu";
  data.device_stats = {{0.0, {{"process_rss_bytes", 1e8}, {"machine_cpu_count", 2}}},
                       {1.5, {{"process_rss_bytes", 1.2e8}, {"machine_cpu_count", 2}}}};
  const std::string html = RenderHtmlReport(data);
  EXPECT_EQ(PointsOf(html, "train_loss_step"), 2);
  EXPECT_EQ(PointsOf(html, "train_loss_epoch"), 2);
  EXPECT_EQ(PointsOf(html, "val_loss"), 2);
  EXPECT_EQ(PointsOf(html, "val_acc"), 2);
  EXPECT_EQ(PointsOf(html, "process_rss_bytes"), 2);
  EXPECT_EQ(PointsOf(html, "epoch"), -1);
  EXPECT_EQ(Count(html, "data-series=\"DeviceStats"), 0);
  // Constants: listed with their value, not charted.
  EXPECT_EQ(PointsOf(html, "lr"), -1);
  EXPECT_EQ(PointsOf(html, "machine_cpu_count"), -1);
  EXPECT_NE(html.find("<tr data-metric=\"lr\" data-why=\"constant\"><th>lr</th><td class=\"value\">0.01</td>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr data-metric=\"machine_cpu_count\" data-why=\"constant\"><th>machine_cpu_count</th>"
                      "<td class=\"value\">2</td>"),
            std::string::npos);
  // Charts: acc (val_acc), loss (train_loss_step, train_loss_epoch, val_loss); and one device chart.
  EXPECT_EQ(Count(html, "<svg "), 3);
  EXPECT_NE(html.find("aria-label=\"loss\""), std::string::npos);
  EXPECT_NE(html.find("aria-label=\"acc\""), std::string::npos);
  // The summary comes first, before the charts; the other tables after them.
  EXPECT_LT(html.find("<table id=\"summary\">"), html.find("<section id=\"metrics\">"));
  EXPECT_GT(html.find("<table id=\"plan\">"), html.find("<section id=\"device-stats\">"));
  EXPECT_NE(html.find("<title>run &lt;1&gt;</title>"), std::string::npos);
  // Nothing to fetch: no scripts, links, images or URLs other than SVG's namespace name.
  for (const char* fetch : {"<script", "<link", "<img", "src=", "url(", "@import"}) {
    EXPECT_EQ(html.find(fetch), std::string::npos) << fetch;
  }
  EXPECT_EQ(Count(html, "http"), Count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
}

// ThroughputMonitor's training rates are curves over the global step; its totals, and validation's rows (at a
// batch's number within one validation, not a global step), are not charted.
TEST(HtmlReportTest, ChartsTrainingThroughputOverSteps) {
  ReportData data;
  data.title = "throughput";
  data.metric_rows = {
      {1, {{"train/time", 0.1}, {"train/batches", 2}, {"train/samples", 16}}},
      {3, {{"train/time", 0.2}, {"train/device/samples_per_sec", 900}, {"train/device/mfu", 0.31}}},
      {2, {{"validate/time", 0.05}, {"validate/device/samples_per_sec", 2000}}},
      {4, {{"validate/time", 0.06}, {"validate/device/samples_per_sec", 2100}}},
      {5, {{"train/time", 0.3}, {"train/device/samples_per_sec", 1000}, {"train/device/mfu", 0.35}}},
      {7, {{"train/time", 0.4}, {"train/device/samples_per_sec", 1100}, {"train/device/mfu", 0.37}}}};
  const std::string html = RenderHtmlReport(data);
  EXPECT_EQ(PointsOf(html, "train/device/samples_per_sec"), 3);
  EXPECT_EQ(PointsOf(html, "train/device/mfu"), 3);
  EXPECT_NE(html.find("aria-label=\"device/samples_per_sec\""), std::string::npos);
  EXPECT_NE(html.find("aria-label=\"device/mfu\""), std::string::npos);
  for (const char* left_out : {"train/time", "train/batches", "train/samples", "validate/time",
                               "validate/device/samples_per_sec"}) {
    EXPECT_EQ(PointsOf(html, left_out), -1) << left_out;
    EXPECT_EQ(html.find(absl::StrCat("data-metric=\"", left_out, "\"")), std::string::npos) << left_out;
  }
  EXPECT_EQ(Count(html, "<svg "), 2);
}

// Names and text from the run reach the page as text, never as markup: a hostile metric name (charted, constant or
// logged once) and a hostile command line stay inside their element.
TEST(HtmlReportTest, EscapesHostileNamesAndCommandLines) {
  const std::string hostile = "x\"><script>alert(1)</script><svg onload='y'";
  ReportData data;
  data.title = hostile;
  data.status = hostile;
  data.summary = {"summary", "Summary", {{"command", "fit '--data=" + hostile + "'"}, {hostile, hostile}}};
  data.tables = {{hostile, hostile, {{hostile, hostile}}}};
  data.model_summary = hostile;
  data.metric_rows = {{1, {{"train_" + hostile, 1.0}, {"val_" + hostile, 2.0}, {hostile + "_const", 5.0}}},
                      {2, {{"train_" + hostile, 0.5}, {hostile + "_const", 5.0}, {hostile + "_once", 1.0}}}};
  data.device = hostile;
  data.device_stats = {{0.0, {{hostile, 1}}}, {1.0, {{hostile, 2}}}};
  const std::string html = RenderHtmlReport(data);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("onload='"), std::string::npos);
  EXPECT_EQ(html.find(hostile), std::string::npos);
  const std::string escaped = EscapeHtml(hostile);
  EXPECT_EQ(escaped, "x&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;svg onload=&#39;y&#39;");
  // Where each went: charted, listed as constant, listed as logged once, the command line in the summary.
  EXPECT_EQ(PointsOf(html, "train_x&quot;&gt;&lt;script&gt;alert\\(1\\)&lt;/script&gt;&lt;svg onload=&#39;y&#39;"), 2);
  EXPECT_NE(html.find("data-metric=\"" + escaped + "_const\" data-why=\"constant\""), std::string::npos);
  EXPECT_NE(html.find("data-metric=\"" + escaped + "_once\" data-why=\"once\""), std::string::npos);
  EXPECT_NE(html.find("<td class=\"value\">fit &#39;--data=" + escaped + "&#39;</td>"), std::string::npos);
  // Every element that opens is one the report writes.
  const std::regex tag("<([a-zA-Z0-9]+)");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), tag); it != std::sregex_iterator(); ++it) {
    static const std::set<std::string> kWritten = {"html", "head", "meta",  "title", "style",  "body", "h1",      "h2",
                                                   "h3",   "p",    "table", "tr",    "th",     "td",   "section", "div",
                                                   "svg",  "rect", "text",  "path",  "circle", "pre"};
    EXPECT_TRUE(kWritten.count((*it)[1])) << (*it)[1];
  }
}

TEST(RunReportTest, GathersPlanMetricsAndDeviceStatsDuringFit) {
  SyntheticOptions synthetic;
  synthetic.num_train = 640;  // 10 batches of 64 per epoch.
  synthetic.num_val = 128;
  SyntheticClusters data(synthetic);
  MlpClassifier model({});
  auto memory = std::make_shared<MemoryLogger>();
  auto report = std::make_shared<RunReport>(memory, RunReportOptions{.title = "test run", .every_n_steps = 4});
  TrainerOptions options;
  options.accelerator = "cpu";
  options.max_epochs = 3;
  options.log_every_n_steps = 4;
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.loggers = {memory};
  options.callbacks = {report};
  Trainer trainer(options);
  ASSERT_TRUE(trainer.fit(model, data).ok());

  ReportData rendered =
      report->Data("finished", {"summary", "Summary", {{"epochs", "3"}}}, {{"final-metrics", "Final metrics", {}}});
  ASSERT_GE(rendered.tables.size(), 3u);
  EXPECT_EQ(rendered.tables[0].id, "plan");
  EXPECT_EQ(rendered.tables[0].rows[0], std::make_pair(std::string("accelerator"), std::string("cpu")));
  EXPECT_EQ(rendered.summary.id, "summary");
  EXPECT_EQ(rendered.tables[1].id, "final-metrics");
  EXPECT_EQ(rendered.tables.back().id, "hparams");
  EXPECT_EQ(rendered.metric_rows.size(), memory->rows().size());
  // Samples: fit start, steps 4, 8, ..., 28 (7 of them; 30 steps in all), and 3 epoch ends.
  EXPECT_EQ(rendered.device_stats.size(), 1u + 30 / 4 + 3);
  EXPECT_TRUE(rendered.device_stats.back().second.count("process_rss_bytes"));
  EXPECT_NE(rendered.model_summary.find("Total params"), std::string::npos);

  const char* root = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(root != nullptr ? root : "/tmp") + "/report.html";
  ASSERT_TRUE(report->Write(path, "finished", {}, {}).ok());
  std::ifstream file(path);
  std::stringstream html;
  html << file.rdbuf();
  // val_loss: one point per epoch (the sanity check is not logged).
  EXPECT_EQ(PointsOf(html.str(), "val_loss"), 3);
  EXPECT_EQ(PointsOf(html.str(), "process_rss_bytes"), static_cast<int>(rendered.device_stats.size()));
}

}  // namespace
}  // namespace kiln
