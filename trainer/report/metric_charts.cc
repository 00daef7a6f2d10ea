#include "trainer/report/metric_charts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace {

constexpr absl::string_view kStages[] = {"train", "val", "valid", "validation", "test"};
constexpr absl::string_view kSeparators[] = {"_", "/", "."};

// Which stage's prefix `metric` starts with: its index in kStages, or -1.
int StageOf(absl::string_view metric) {
  for (size_t i = 0; i < sizeof(kStages) / sizeof(kStages[0]); ++i) {
    for (absl::string_view separator : kSeparators) {
      if (absl::StartsWith(metric, kStages[i]) && metric.substr(kStages[i].size()).substr(0, 1) == separator &&
          metric.size() > kStages[i].size() + 1) {
        return static_cast<int>(i);
      }
    }
  }
  return -1;
}

// 0 for _step, 1 for neither, 2 for _epoch: a chart shows the raw curve first, then its epoch means.
int ReductionOf(absl::string_view metric) {
  if (absl::EndsWith(metric, "_step")) return 0;
  if (absl::EndsWith(metric, "_epoch")) return 2;
  return 1;
}

// The ordering key of a series within its chart: stage (unprefixed first, then train, val, test), reduction, name.
std::tuple<int, int, std::string> SeriesOrder(const ChartSeries& series) {
  return {StageOf(series.name), ReductionOf(series.name), series.name};
}

}  // namespace

std::string ChartKey(absl::string_view metric) {
  absl::string_view key = metric;
  if (!absl::ConsumeSuffix(&key, "_step")) absl::ConsumeSuffix(&key, "_epoch");
  const int stage = StageOf(key);
  if (stage >= 0) key.remove_prefix(kStages[stage].size() + 1);
  if (key.empty()) return std::string(metric);
  return std::string(key);
}

ChartPlan PlanCharts(const std::vector<ChartSeries>& series, bool share) {
  ChartPlan plan;
  // Per chart: its curves, and the series with one finite value, which join it only if it has a curve.
  std::map<std::string, std::pair<std::vector<ChartSeries>, std::vector<UnchartedMetric>>> charts;
  for (const ChartSeries& one : series) {
    const std::string key = share ? ChartKey(one.name) : one.name;
    auto& [curves, once] = charts[key];
    if (one.points.empty()) continue;
    int64_t finite = 0;
    const std::pair<double, double>* first_finite = nullptr;
    bool all_same = one.points.size() >= 2;
    for (const auto& point : one.points) {
      if (std::isfinite(point.first) && std::isfinite(point.second)) {
        if (finite++ == 0) first_finite = &point;
      }
      if (!(point.second == one.points.front().second)) all_same = false;
    }
    const auto count = static_cast<int64_t>(one.points.size());
    if (all_same) {
      plan.uncharted.push_back(
          {one.name, UnchartedMetric::Why::kConstant, one.points.front().second, count, one.points.front().first});
    } else if (finite == 0) {
      plan.uncharted.push_back(
          {one.name, UnchartedMetric::Why::kNotFinite, one.points.front().second, count, one.points.front().first});
    } else if (finite == 1) {
      curves.push_back(one);
      once.push_back({one.name, UnchartedMetric::Why::kLoggedOnce, first_finite->second, count, first_finite->first});
    } else {
      curves.push_back(one);
    }
  }
  for (auto& [name, entry] : charts) {
    auto& [curves, once] = entry;
    if (curves.size() == once.size()) {  // Dots only (or nothing): no chart.
      for (UnchartedMetric& metric : once) plan.uncharted.push_back(std::move(metric));
      continue;
    }
    std::stable_sort(curves.begin(), curves.end(),
                     [](const ChartSeries& a, const ChartSeries& b) { return SeriesOrder(a) < SeriesOrder(b); });
    plan.charts.push_back({name, std::move(curves)});
  }
  std::sort(plan.uncharted.begin(), plan.uncharted.end(),
            [](const UnchartedMetric& a, const UnchartedMetric& b) { return a.name < b.name; });
  return plan;
}

}  // namespace kiln
