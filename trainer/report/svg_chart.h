// Line charts as inline SVG, for the run report: no script, no external resource, readable by any browser.
//
// Each series becomes one <path class="series" data-series="<name>" data-points="<n>" d="M x y L x y ..."> with one
// vertex per finite point, in the order given; non-finite points are left out. A series of one point is drawn as a
// dot, and a series of few points (kMarkersUpTo) gets a dot on each, so that values logged once an epoch read as
// measurements rather than as a line.
//
// The axes carry round ticks with a light grid and their titles (axis_ticks.h): y always starts and ends at a tick
// and a nearly flat curve is not zoomed into a cliff (PadFlatRange); x spans the data (a step or a time starts where
// the data starts). The legend, below the axes, names each series; a chart of one series named like its y axis has
// none. Every text (title, axis titles, series names) is HTML-escaped.
#ifndef KILN_TRAINER_REPORT_SVG_CHART_H_
#define KILN_TRAINER_REPORT_SVG_CHART_H_

#include <string>
#include <utility>
#include <vector>

namespace kiln {

inline constexpr int kMarkersUpTo = 40;

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y).
};

struct ChartOptions {
  std::string title;
  std::string x_label;  // The x axis' title, e.g. "step".
  std::string y_label;  // The y axis' title, e.g. "loss".
  int width = 460;
  int height = 290;  // Without the legend's rows, which add to it.
  // x on a log10 scale (e.g. learning rates): points with x <= 0 are left out, and the ticks sit at powers of ten
  // (every k-th where more than kMaxTicks would), labelled 1e-06, 1e-05, ...
  bool log_x = false;
  // Marked x values, each a dashed vertical line <path class="x-mark" data-x="<x, %.17g>"> with its label
  // <text class="x-mark-label"> at the top of the plot (e.g. lr_find's suggestion).
  std::vector<std::pair<double, std::string>> x_marks;
};

std::string LineChartSvg(const std::vector<ChartSeries>& series, const ChartOptions& options);

// Text made safe for HTML and SVG, in element content and in quoted attributes (& < > " ').
std::string EscapeHtml(const std::string& text);

}  // namespace kiln

#endif  // KILN_TRAINER_REPORT_SVG_CHART_H_
