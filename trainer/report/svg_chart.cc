#include "trainer/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/report/axis_ticks.h"

namespace kiln {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};
// Room around the plot: tick labels and the rotated y title on the left; tick labels and the x title below.
constexpr int kLeft = 74;
constexpr int kRight = 18;
constexpr int kTop = 30;
constexpr int kBottom = 44;
constexpr int kLegendRow = 18;
// Width of one character of the 11px sans-serif legend text, a little generous, to lay the legend out without
// measuring text (which SVG cannot do without script).
constexpr double kCharWidth = 6.6;

struct LegendItem {
  double x;
  int row;
};

// Legend entries left to right, wrapping to a new row where the next would not fit.
std::vector<LegendItem> LayOutLegend(const std::vector<ChartSeries>& series, double width) {
  std::vector<LegendItem> items;
  double x = 0;
  int row = 0;
  for (const ChartSeries& one : series) {
    const double item_width = 20 + kCharWidth * static_cast<double>(one.name.size()) + 14;
    if (x > 0 && x + item_width > width) {
      x = 0;
      ++row;
    }
    items.push_back({x, row});
    x += item_width;
  }
  return items;
}

// Ticks for a log10 axis spanning [lo, hi] (exponents): the powers of ten inside, every k-th where more than kMaxTicks
// would fit; the axis spans the data exactly, as x axes do.
AxisTicks LogTicks(double lo, double hi) {
  AxisTicks ticks;
  if (hi - lo < 1e-9) {
    lo -= 0.5;
    hi += 0.5;
  }
  ticks.range = {lo, hi};
  const double first = std::ceil(lo);
  const double count = std::floor(hi) - first + 1;
  const double every = count > kMaxTicks ? std::ceil(count / kMaxTicks) : 1;
  ticks.step = every;
  for (double e = first; e <= hi && ticks.values.size() < 64; e += every) {
    ticks.values.push_back(e);
    ticks.labels.push_back(absl::StrFormat("1e%+03.0f", e));
  }
  return ticks;
}

}  // namespace

std::string EscapeHtml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string LineChartSvg(const std::vector<ChartSeries>& series, const ChartOptions& options) {
  double x_min = std::numeric_limits<double>::infinity();
  double x_max = -x_min;
  double y_min = x_min;
  double y_max = -x_min;
  // Where x sits on the axis: x itself, or log10(x) on a log scale (NaN, and so left out, for x <= 0).
  const auto axis_x = [&](double x) {
    if (!options.log_x) return x;
    return x > 0 ? std::log10(x) : std::numeric_limits<double>::quiet_NaN();
  };
  for (const ChartSeries& one : series) {
    for (const auto& [raw_x, y] : one.points) {
      const double x = axis_x(raw_x);
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_min = std::min(y_min, y);
      y_max = std::max(y_max, y);
    }
  }
  const bool empty = !std::isfinite(x_min);
  if (empty) x_min = x_max = y_min = y_max = 0;
  const ValueRange y_data = PadFlatRange(y_min, y_max);
  const AxisTicks y_ticks = NiceTicks(y_data.lo, y_data.hi, /*extend=*/true);
  AxisTicks x_ticks = NiceTicks(x_min, x_max, /*extend=*/false);
  if (options.log_x && !empty) x_ticks = LogTicks(x_min, x_max);
  const double x_lo = x_ticks.range.lo;
  const double x_hi = x_ticks.range.hi;
  const double y_lo = y_ticks.range.lo;
  const double y_hi = y_ticks.range.hi;

  const bool legend = series.size() > 1 || (series.size() == 1 && series[0].name != options.y_label);
  const std::vector<LegendItem> items = LayOutLegend(series, options.width - kLeft - kRight);
  const int legend_rows = legend && !items.empty() ? items.back().row + 1 : 0;
  const int height = options.height + (legend_rows > 0 ? legend_rows * kLegendRow + 4 : 0);
  const double plot_left = kLeft;
  const double plot_right = options.width - kRight;
  const double plot_top = kTop;
  const double plot_bottom = options.height - kBottom;
  const auto px = [&](double raw_x) {
    return plot_left + (axis_x(raw_x) - x_lo) / (x_hi - x_lo) * (plot_right - plot_left);
  };
  const auto py = [&](double y) { return plot_top + (y_hi - y) / (y_hi - y_lo) * (plot_bottom - plot_top); };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "role=\"img\" aria-label=\"%s\">\n",
      options.width, height, options.width, height, EscapeHtml(options.title));
  absl::StrAppendFormat(&svg, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", options.width,
                        height);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%d\" y=\"19\" class=\"title\" font-size=\"13\" font-weight=\"bold\">%s</text>\n",
                        kLeft, EscapeHtml(options.title));
  const auto text = [&](double x, double y, const char* anchor, const std::string& label, const char* extra = "") {
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"11\" fill=\"#444\"%s>%s</text>\n",
                          x, y, anchor, extra, EscapeHtml(label));
  };
  // The grid first, under everything else; each line with its tick's label.
  if (!empty) {
    for (size_t i = 0; i < y_ticks.values.size(); ++i) {
      const double y = py(y_ticks.values[i]);
      absl::StrAppendFormat(&svg,
                            "<path class=\"grid\" d=\"M %.1f %.2f L %.1f %.2f\" stroke=\"#e4e4e4\" "
                            "stroke-width=\"1\"/>\n",
                            plot_left, y, plot_right, y);
      text(plot_left - 6, y + 4, "end", y_ticks.labels[i], " class=\"tick y-tick\"");
    }
    for (size_t i = 0; i < x_ticks.values.size(); ++i) {
      const double x = px(options.log_x ? std::pow(10.0, x_ticks.values[i]) : x_ticks.values[i]);
      absl::StrAppendFormat(&svg,
                            "<path class=\"grid\" d=\"M %.2f %.1f L %.2f %.1f\" stroke=\"#e4e4e4\" "
                            "stroke-width=\"1\"/>\n",
                            x, plot_top, x, plot_bottom);
      text(x, plot_bottom + 15, "middle", x_ticks.labels[i], " class=\"tick x-tick\"");
    }
  } else {
    text((plot_left + plot_right) / 2, (plot_top + plot_bottom) / 2, "middle", "no values");
  }
  absl::StrAppendFormat(&svg,
                        "<path class=\"axis\" d=\"M %.1f %.1f L %.1f %.1f L %.1f %.1f\" stroke=\"#666\" "
                        "fill=\"none\"/>\n",
                        plot_left, plot_top, plot_left, plot_bottom, plot_right, plot_bottom);
  // Axis titles: x centred under its labels, y turned along its axis at the left edge.
  absl::StrAppendFormat(&svg,
                        "<text class=\"axis-title x-title\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                        "font-size=\"12\" fill=\"#222\">%s</text>\n",
                        (plot_left + plot_right) / 2, plot_bottom + 33, EscapeHtml(options.x_label));
  absl::StrAppendFormat(&svg,
                        "<text class=\"axis-title y-title\" transform=\"translate(15 %.1f) rotate(-90)\" "
                        "text-anchor=\"middle\" font-size=\"12\" fill=\"#222\">%s</text>\n",
                        (plot_top + plot_bottom) / 2, EscapeHtml(options.y_label));

  for (size_t i = 0; i < series.size(); ++i) {
    const ChartSeries& one = series[i];
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    // One point would be a zero-length line, which does not show: a larger dot. Few points: a dot on each.
    const auto finite = std::count_if(one.points.begin(), one.points.end(), [&](const std::pair<double, double>& p) {
      return std::isfinite(axis_x(p.first)) && std::isfinite(p.second);
    });
    const char* radius = finite == 1 ? "3.5" : finite <= kMarkersUpTo ? "2.5" : nullptr;
    std::string d;
    std::string dots;
    int points = 0;
    for (const auto& [x, y] : one.points) {
      if (!std::isfinite(axis_x(x)) || !std::isfinite(y)) continue;
      absl::StrAppendFormat(&d, "%s%.2f %.2f", points == 0 ? "M " : " L ", px(x), py(y));
      if (radius != nullptr) {
        absl::StrAppendFormat(&dots, "<circle class=\"marker\" cx=\"%.2f\" cy=\"%.2f\" r=\"%s\" fill=\"%s\"/>\n", px(x),
                              py(y), radius, color);
      }
      ++points;
    }
    absl::StrAppendFormat(&svg,
                          "<path class=\"series\" data-series=\"%s\" data-points=\"%d\" d=\"%s\" stroke=\"%s\" "
                          "stroke-width=\"2\" fill=\"none\"/>\n",
                          EscapeHtml(one.name), points, d, color);
    svg += dots;
    if (legend) {
      const double x = kLeft + items[i].x;
      const double y = options.height + 12 + items[i].row * kLegendRow;  // Under the x title.
      absl::StrAppendFormat(&svg,
                            "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"3\" fill=\"%s\"/>"
                            "<text class=\"legend\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#333\">%s</text>\n",
                            x, y - 4, color, x + 20, y, EscapeHtml(one.name));
    }
  }
  for (const auto& [x, label] : options.x_marks) {
    const double at = axis_x(x);
    if (empty || !std::isfinite(at) || at < x_lo || at > x_hi) continue;
    absl::StrAppendFormat(&svg,
                          "<path class=\"x-mark\" data-x=\"%.17g\" d=\"M %.2f %.1f L %.2f %.1f\" stroke=\"#d62728\" "
                          "stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\n",
                          x, px(x), plot_top, px(x), plot_bottom);
    text(px(x) + 4, plot_top + 11, "start", label, " class=\"x-mark-label\"");
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kiln
