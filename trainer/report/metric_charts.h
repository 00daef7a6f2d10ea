// Which curves of the run report share a chart, and which get no chart at all.
//
// Lightning names one quantity several ways: `train_loss_step` and `train_loss_epoch` (a metric logged with both
// on_step and on_epoch), `val_loss`, `test_loss`, or `train/loss` and `val/loss`. They all measure the loss, so
// they share one chart named `loss` (its y axis), and the legend tells them apart; in a chart, train comes before
// val and test, and _step before _epoch.
//
// A chart of a constant says nothing its value does not say better, and a chart of one point is a dot: such series
// are listed with their value instead (UnchartedMetric). Precisely, a series is
//   - constant when it has two or more values and all are the same (NaN is never the same as anything),
//   - logged once when it has one finite value; it is still drawn, as a dot, on a chart that has a curve,
//   - not finite when it has no finite value,
// and every other series is a curve. A chart is drawn when at least one of its series is a curve.
//
// Pure functions, no state; they never throw.
#ifndef KILN_TRAINER_REPORT_METRIC_CHARTS_H_
#define KILN_TRAINER_REPORT_METRIC_CHARTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainer/report/svg_chart.h"

namespace kiln {

// The chart `metric` goes on: its name without a stage prefix (train, val, valid, validation, test, followed by
// '_', '/' or '.') and without a `_step` or `_epoch` suffix. "train_loss_step" -> "loss", "val/acc" -> "acc",
// "lr" -> "lr". A name that would become empty is kept whole ("train_" -> "train_").
std::string ChartKey(absl::string_view metric);

struct MetricChart {
  std::string name;                 // The ChartKey of its series, or the series' own name when not shared.
  std::vector<ChartSeries> series;  // In the order described above.
};

struct UnchartedMetric {
  enum class Why { kConstant, kLoggedOnce, kNotFinite };
  std::string name;
  Why why = Why::kConstant;
  double value = 0;   // The constant, the one finite value, or the first value logged.
  int64_t count = 0;  // Values logged.
  double x = 0;       // Where the value that `value` is was logged.
};

struct ChartPlan {
  std::vector<MetricChart> charts;         // By name.
  std::vector<UnchartedMetric> uncharted;  // By name.
};

// The charts for `series` (one per metric, points in the order logged; names distinct). `share`: series with one
// ChartKey share a chart (the trainer's metrics); otherwise each series has its own (device statistics).
ChartPlan PlanCharts(const std::vector<ChartSeries>& series, bool share);

}  // namespace kiln

#endif  // KILN_TRAINER_REPORT_METRIC_CHARTS_H_
