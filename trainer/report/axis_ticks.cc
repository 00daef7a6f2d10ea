#include "trainer/report/axis_ticks.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {
namespace {

// m * 10^exponent, computed so that multiples of a step below 1 come out as the doubles nearest their decimal
// values (3 * 0.1 would be 0.30000000000000004; 3 / 10 is 0.3).
double RoundValue(double m, double exponent) {
  return exponent >= 0 ? m * std::pow(10.0, exponent) : m / std::pow(10.0, -exponent);
}

// Digits after the point that tell multiples of `step` apart (0.05 -> 2, 0.5 -> 1, 2 -> 0).
int Decimals(double step) { return std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 17); }

AxisTicks Unrounded(double lo, double hi) {
  AxisTicks ticks;
  ticks.range = {lo, hi};
  ticks.values = {lo, hi};
  if (lo == hi) ticks.values.pop_back();
  for (double value : ticks.values) ticks.labels.push_back(absl::StrFormat("%g", value));
  return ticks;
}

}  // namespace

ValueRange PadFlatRange(double lo, double hi) {
  const double magnitude = std::max(std::abs(lo), std::abs(hi));
  const double min_span = magnitude > 0 ? kMinRelativeSpan * magnitude : 1;
  if (hi - lo >= min_span) return {lo, hi};
  const double middle = lo / 2 + hi / 2;
  return {middle - min_span / 2, middle + min_span / 2};
}

AxisTicks NiceTicks(double lo, double hi, bool extend) {
  if (lo == hi) {
    const ValueRange padded = PadFlatRange(lo, hi);
    lo = padded.lo;
    hi = padded.hi;
  }
  const double span = hi - lo;
  if (!std::isfinite(span) || !(span > 0)) return Unrounded(lo, hi);
  // Steps grow 1, 2, 5, 10, ... from one that gives more than kMaxTicks ticks; the first that gives at most
  // kMaxTicks is the answer. Each step is at most 2.5 times the one before, so that one still gives 4 or more
  // extended ticks.
  double exponent = std::floor(std::log10(span / kMaxTicks));
  for (int decade = 0; decade < 4; ++decade, ++exponent) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double step = RoundValue(m, exponent);
      if (!(step > 0) || !std::isfinite(step)) continue;
      // Indices of the first and last tick; the tolerance keeps 0.3 / 0.1 = 2.9999999999999996 on tick 3.
      const double first = extend ? std::floor(lo / step + 1e-9) : std::ceil(lo / step - 1e-9);
      const double last = extend ? std::ceil(hi / step - 1e-9) : std::floor(hi / step + 1e-9);
      // Beyond 2^53 indices are no longer whole numbers: no round step fits this range.
      if (!(std::abs(first) < 1e15 && std::abs(last) < 1e15)) return Unrounded(lo, hi);
      if (last - first + 1 > kMaxTicks) continue;
      AxisTicks ticks;
      ticks.step = step;
      for (int64_t i = static_cast<int64_t>(first); i <= static_cast<int64_t>(last); ++i) {
        ticks.values.push_back(RoundValue(static_cast<double>(i) * m, exponent));
      }
      ticks.range = extend ? ValueRange{ticks.values.front(), ticks.values.back()} : ValueRange{lo, hi};
      if (!std::isfinite(ticks.range.lo) || !std::isfinite(ticks.range.hi)) return Unrounded(lo, hi);
      ticks.labels = TickLabels(ticks.values, step);
      return ticks;
    }
  }
  return Unrounded(lo, hi);
}

std::vector<std::string> TickLabels(const std::vector<double>& values, double step) {
  double largest = 0;
  for (double value : values) largest = std::max(largest, std::abs(value));
  std::vector<std::string> labels;
  // Large values: a prefix from the largest tick, for every tick of the axis (0, 5k, 10k, 15k).
  static const std::pair<double, const char*> kPrefixes[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  if (largest >= 1e4) {
    for (const auto& [scale, prefix] : kPrefixes) {
      if (largest < scale) continue;
      const int decimals = Decimals(step / scale);
      for (double value : values) {
        labels.push_back(value == 0 ? "0" : absl::StrCat(absl::StrFormat("%.*f", decimals, value / scale), prefix));
      }
      return labels;
    }
  }
  // Small steps: fixed decimals would be long runs of zeros; the mantissa gets the digits the step needs.
  if (step < 1e-4 && largest > 0) {
    const int digits = std::clamp(
        static_cast<int>(std::floor(std::log10(largest) + 1e-9) - std::floor(std::log10(step) + 1e-9)), 0, 17);
    for (double value : values) labels.push_back(value == 0 ? "0" : absl::StrFormat("%.*e", digits, value));
    return labels;
  }
  const int decimals = Decimals(step);
  for (double value : values) labels.push_back(absl::StrFormat("%.*f", decimals, value));
  return labels;
}

}  // namespace kiln
