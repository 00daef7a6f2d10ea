// The scale of one chart axis in the run report: which range it spans, where its ticks go and how they are labelled.
//
// Ticks sit at round values, multiples of a step that is 1, 2 or 5 times a power of ten, and an axis gets at most
// kMaxTicks of them (4 to 7 whenever the range needs that many). Labels share one format per axis, so that they line
// up and never show floating-point noise: 0.05, 0.10, 0.15; 50, 100; 10k, 12k and 1.5M only from 10^4 up; 1.2e-05
// below 10^-4.
//
// A nearly flat curve is not blown up into a cliff: PadFlatRange widens a range narrower than kMinRelativeSpan of
// its largest magnitude, so that noise of 0.1% around 24 GB draws as a flat line, not as a drop from top to bottom.
//
// Pure functions, no state; they never throw.
#ifndef KILN_TRAINER_REPORT_AXIS_TICKS_H_
#define KILN_TRAINER_REPORT_AXIS_TICKS_H_

#include <string>
#include <vector>

namespace kiln {

inline constexpr int kMaxTicks = 7;
inline constexpr double kMinRelativeSpan = 0.05;

struct ValueRange {
  double lo = 0;
  double hi = 0;
};

// [lo, hi] when hi - lo >= kMinRelativeSpan * max(|lo|, |hi|); otherwise a range of that span centred on the
// middle of [lo, hi] (span 1 when both are 0). A padded range of positive values stays positive (and of negative
// values negative). Requires finite lo <= hi.
ValueRange PadFlatRange(double lo, double hi);

struct AxisTicks {
  ValueRange range;                 // What the axis spans.
  double step = 0;                  // Between ticks; 0 when the ticks are not round (see NiceTicks).
  std::vector<double> values;       // Ascending, inside `range`.
  std::vector<std::string> labels;  // One per value.
};

// Ticks for data in [lo, hi] (finite, lo <= hi; lo == hi is widened by one unit each side first): the smallest
// round step that puts at most kMaxTicks ticks on the axis. `extend`: the axis grows to the ticks just outside the
// data, so that the grid frames it (for values); otherwise it spans the data exactly and only ticks inside are kept
// (for steps and seconds, which start where the data starts). Where no round step fits (a range too wide for
// doubles, such as -1e308 to 1e308), the axis spans the data and its two ends are the ticks, labelled with %g.
AxisTicks NiceTicks(double lo, double hi, bool extend);

// Labels for ticks that are multiples of `step` (> 0), in the format described above.
std::vector<std::string> TickLabels(const std::vector<double>& values, double step);

}  // namespace kiln

#endif  // KILN_TRAINER_REPORT_AXIS_TICKS_H_
