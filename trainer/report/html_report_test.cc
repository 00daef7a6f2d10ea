#include "trainer/report/html_report.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"
#include "trainer/classifier.h"
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

TEST(SvgChartTest, OneVertexPerFinitePoint) {
  const std::string svg = LineChartSvg({{"a", {{0, 1}, {1, 2}, {2, NAN}, {3, 0.5}}}, {"b<&>", {{0, 3}}}, {"empty", {}}},
                                       {.title = "t & u"});
  EXPECT_EQ(PointsOf(svg, "a"), 3);
  EXPECT_EQ(PointsOf(svg, "b&lt;&amp;&gt;"), 1);
  EXPECT_EQ(Count(svg, "<circle"), 1);  // The single point shows as a dot.
  EXPECT_EQ(PointsOf(svg, "empty"), 0);
  EXPECT_NE(svg.find(">t &amp; u</text>"), std::string::npos);
  // The ranges are written at the ends of the axes.
  EXPECT_NE(svg.find(">3</text>"), std::string::npos);
  EXPECT_NE(svg.find(">0.5</text>"), std::string::npos);
}

TEST(HtmlReportTest, GroupsStepAndEpochCurvesAndIsSelfContained) {
  ReportData data;
  data.title = "run <1>";
  data.status = "finished";
  data.tables = {{"plan", "Plan", {{"accelerator", "cpu"}}}};
  data.metric_rows = {{50, {{"train_loss_step", 1.0}, {"epoch", 0}}},
                      {64, {{"val_loss", 0.9}, {"val_acc", 0.5}}},
                      {64, {{"train_loss_epoch", 0.95}, {"epoch", 0}}},
                      {100, {{"train_loss_step", 0.7}, {"epoch", 1}, {"DeviceStatsMonitor.x/y", 3}}},
                      {128, {{"val_loss", 0.6}, {"val_acc", 0.8}}}};
  data.device = "cpu cpu";
  data.device_stats = {{0.0, {{"process_rss_bytes", 1e8}}}, {1.5, {{"process_rss_bytes", 1.2e8}}}};
  const std::string html = RenderHtmlReport(data);
  EXPECT_EQ(PointsOf(html, "train_loss_step"), 2);
  EXPECT_EQ(PointsOf(html, "train_loss_epoch"), 1);
  EXPECT_EQ(PointsOf(html, "val_acc"), 2);
  EXPECT_EQ(PointsOf(html, "process_rss_bytes"), 2);
  EXPECT_EQ(PointsOf(html, "epoch"), -1);
  EXPECT_EQ(Count(html, "data-series=\"DeviceStats"), 0);
  // Charts: train_loss (two series), val_acc, val_loss; and one device chart.
  EXPECT_EQ(Count(html, "<svg "), 4);
  EXPECT_NE(html.find("<title>run &lt;1&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find("<table id=\"plan\">"), std::string::npos);
  // Nothing to fetch: no scripts, links, images or URLs other than SVG's namespace name.
  for (const char* fetch : {"<script", "<link", "<img", "src=", "url(", "@import"}) {
    EXPECT_EQ(html.find(fetch), std::string::npos) << fetch;
  }
  EXPECT_EQ(Count(html, "http"), Count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
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

  ReportData rendered = report->Data("finished", {{"summary", "Summary", {{"epochs", "3"}}}});
  ASSERT_GE(rendered.tables.size(), 3u);
  EXPECT_EQ(rendered.tables[0].id, "plan");
  EXPECT_EQ(rendered.tables[0].rows[0], std::make_pair(std::string("accelerator"), std::string("cpu")));
  EXPECT_EQ(rendered.tables[1].id, "summary");
  EXPECT_EQ(rendered.tables.back().id, "hparams");
  EXPECT_EQ(rendered.metric_rows.size(), memory->rows().size());
  // Samples: fit start, steps 4, 8, ..., 28 (7 of them; 30 steps in all), and 3 epoch ends.
  EXPECT_EQ(rendered.device_stats.size(), 1u + 30 / 4 + 3);
  EXPECT_TRUE(rendered.device_stats.back().second.count("process_rss_bytes"));
  EXPECT_NE(rendered.model_summary.find("Total params"), std::string::npos);

  const char* root = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(root != nullptr ? root : "/tmp") + "/report.html";
  ASSERT_TRUE(report->Write(path, "finished", {}).ok());
  std::ifstream file(path);
  std::stringstream html;
  html << file.rdbuf();
  // val_loss: one point per epoch (the sanity check is not logged).
  EXPECT_EQ(PointsOf(html.str(), "val_loss"), 3);
  EXPECT_EQ(PointsOf(html.str(), "process_rss_bytes"), static_cast<int>(rendered.device_stats.size()));
}

}  // namespace
}  // namespace kiln
