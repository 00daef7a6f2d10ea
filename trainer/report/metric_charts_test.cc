#include "trainer/report/metric_charts.h"

#include <cmath>

#include "gtest/gtest.h"

namespace kiln {
namespace {

using Why = UnchartedMetric::Why;

TEST(ChartKeyTest, Table) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train_loss_step", "loss"},
      {"train_loss_epoch", "loss"},
      {"train_loss", "loss"},
      {"val_loss", "loss"},
      {"test_loss", "loss"},
      {"valid_acc", "acc"},
      {"validation_acc", "acc"},
      {"train/acc", "acc"},
      {"val/acc", "acc"},
      {"val.mae", "mae"},
      {"loss_step", "loss"},
      {"lr", "lr"},
      // Only a whole stage word followed by a separator is a prefix.
      {"trainable_params", "trainable_params"},
      {"value", "value"},
      {"validity_step", "validity"},
      {"train_step", "train"},
      // Nothing left: kept whole.
      {"train_", "train_"},
      {"_step", "_step"},
      {"", ""},
  };
  for (const auto& [metric, key] : cases) EXPECT_EQ(ChartKey(metric), key) << metric;
}

std::vector<std::string> Names(const MetricChart& chart) {
  std::vector<std::string> names;
  for (const ChartSeries& series : chart.series) names.push_back(series.name);
  return names;
}

ChartSeries Curve(const std::string& name, std::vector<double> values, double first_x = 0) {
  ChartSeries series{name, {}};
  for (size_t i = 0; i < values.size(); ++i) series.points.emplace_back(first_x + 10.0 * i, values[i]);
  return series;
}

TEST(PlanChartsTest, TrainAndValidationOfOneQuantityShareAChart) {
  // In the order a fit logs them: val first (end of epoch 0), then train.
  const ChartPlan plan = PlanCharts(
      {
          Curve("train_loss_step", {1.0, 0.8, 0.6}),
          Curve("val_loss", {0.9, 0.7}),
          Curve("val_acc", {0.5, 0.7}),
          Curve("train_loss_epoch", {0.95, 0.75}),
          Curve("train_acc", {0.4, 0.6}),
          Curve("lr", {0.1, 0.01}),
      },
      /*share=*/true);
  ASSERT_EQ(plan.charts.size(), 3u);
  EXPECT_EQ(plan.charts[0].name, "acc");
  EXPECT_EQ(Names(plan.charts[0]), (std::vector<std::string>{"train_acc", "val_acc"}));
  EXPECT_EQ(plan.charts[1].name, "loss");
  EXPECT_EQ(Names(plan.charts[1]), (std::vector<std::string>{"train_loss_step", "train_loss_epoch", "val_loss"}));
  EXPECT_EQ(plan.charts[2].name, "lr");
  EXPECT_TRUE(plan.uncharted.empty());
  // The points are passed through as given.
  EXPECT_EQ(plan.charts[1].series[2].points, Curve("val_loss", {0.9, 0.7}).points);
}

TEST(PlanChartsTest, DeviceStatisticsKeepAChartEach) {
  const ChartPlan plan = PlanCharts({Curve("test_rss", {1, 2}), Curve("rss", {3, 4})}, /*share=*/false);
  ASSERT_EQ(plan.charts.size(), 2u);
  EXPECT_EQ(plan.charts[0].name, "rss");
  EXPECT_EQ(plan.charts[1].name, "test_rss");
}

TEST(PlanChartsTest, ConstantsAreListedNotCharted) {
  const ChartPlan plan = PlanCharts(
      {
          Curve("machine_cpu_count", {2, 2, 2, 2}, 5),
          Curve("lr", {0.001, 0.001}),
          Curve("train_loss", {1.0, 0.5}),
          // Almost constant is not constant: charted (and padded, see axis_ticks.h).
          Curve("val_loss", {0.5, std::nextafter(0.5, 1.0)}),
          // NaN is never the same as anything; a curve with one NaN keeps its chart.
          Curve("val_acc", {0.5, NAN, 0.5}),
      },
      /*share=*/true);
  ASSERT_EQ(plan.uncharted.size(), 2u);
  EXPECT_EQ(plan.uncharted[0].name, "lr");
  EXPECT_EQ(plan.uncharted[0].why, Why::kConstant);
  EXPECT_EQ(plan.uncharted[0].value, 0.001);
  EXPECT_EQ(plan.uncharted[0].count, 2);
  EXPECT_EQ(plan.uncharted[1].name, "machine_cpu_count");
  EXPECT_EQ(plan.uncharted[1].why, Why::kConstant);
  EXPECT_EQ(plan.uncharted[1].value, 2);
  EXPECT_EQ(plan.uncharted[1].count, 4);
  EXPECT_EQ(plan.uncharted[1].x, 5);
  ASSERT_EQ(plan.charts.size(), 2u);
  EXPECT_EQ(Names(plan.charts[0]), (std::vector<std::string>{"val_acc"}));
  EXPECT_EQ(Names(plan.charts[1]), (std::vector<std::string>{"train_loss", "val_loss"}));
}

TEST(PlanChartsTest, ASingleValueIsADotBesideACurveAndListedOtherwise) {
  // One epoch, logging every 10 steps: the step curve has points, every epoch-level metric has one.
  const ChartPlan plan = PlanCharts(
      {
          Curve("train_loss_step", {1.0, 0.9, 0.7}, 9),
          Curve("val_loss", {0.8}, 63),
          Curve("val_acc", {0.6}, 63),
          Curve("train_loss_epoch", {0.85}, 63),
          Curve("train_acc", {0.55}, 63),
          Curve("exploded", {NAN, INFINITY}),
          Curve("nothing", {}),
      },
      /*share=*/true);
  ASSERT_EQ(plan.charts.size(), 1u);
  EXPECT_EQ(Names(plan.charts[0]), (std::vector<std::string>{"train_loss_step", "train_loss_epoch", "val_loss"}));
  ASSERT_EQ(plan.uncharted.size(), 3u);
  EXPECT_EQ(plan.uncharted[0].name, "exploded");
  EXPECT_EQ(plan.uncharted[0].why, Why::kNotFinite);
  EXPECT_EQ(plan.uncharted[0].count, 2);
  EXPECT_EQ(plan.uncharted[1].name, "train_acc");
  EXPECT_EQ(plan.uncharted[1].why, Why::kLoggedOnce);
  EXPECT_EQ(plan.uncharted[1].value, 0.55);
  EXPECT_EQ(plan.uncharted[1].x, 63);
  EXPECT_EQ(plan.uncharted[2].name, "val_acc");
  EXPECT_EQ(plan.uncharted[2].why, Why::kLoggedOnce);
}

TEST(PlanChartsTest, OneFiniteValueAmongNonFiniteOnesCountsAsLoggedOnce) {
  const ChartPlan plan = PlanCharts({Curve("loss", {NAN, 0.25, NAN}, 0)}, /*share=*/true);
  ASSERT_EQ(plan.uncharted.size(), 1u);
  EXPECT_EQ(plan.uncharted[0].why, Why::kLoggedOnce);
  EXPECT_EQ(plan.uncharted[0].value, 0.25);
  EXPECT_EQ(plan.uncharted[0].x, 10);
  EXPECT_EQ(plan.uncharted[0].count, 3);
  EXPECT_TRUE(plan.charts.empty());
}

}  // namespace
}  // namespace kiln
