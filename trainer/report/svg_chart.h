// Line charts as inline SVG, for the run report: no script, no external resource, readable by any browser.
//
// Each series becomes one <path class="series" data-series="<name>" data-points="<n>" d="M x y L x y ..."> with one
// vertex per finite point, in the order given; non-finite points are left out. The chart has axes, the x and y
// ranges written at the ends of the axes, a title and a legend.
#ifndef KILN_TRAINER_REPORT_SVG_CHART_H_
#define KILN_TRAINER_REPORT_SVG_CHART_H_

#include <string>
#include <utility>
#include <vector>

namespace kiln {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y).
};

struct ChartOptions {
  std::string title;
  std::string x_label;
  int width = 420;
  int height = 240;
};

std::string LineChartSvg(const std::vector<ChartSeries>& series, const ChartOptions& options);

// Text made safe for HTML and SVG (& < > " ').
std::string EscapeHtml(const std::string& text);

}  // namespace kiln

#endif  // KILN_TRAINER_REPORT_SVG_CHART_H_
