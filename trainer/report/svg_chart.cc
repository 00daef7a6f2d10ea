#include "trainer/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};
constexpr int kLeft = 64;
constexpr int kRight = 12;
constexpr int kTop = 28;
constexpr int kBottom = 40;

// Short axis labels: SI prefixes for large magnitudes (2.2e10 -> "22G"), with enough digits to tell `other` apart.
std::string Number(double value, double other) {
  static const std::pair<double, const char*> kPrefixes[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e4, "K"}};
  double scale = 1;
  const char* prefix = "";
  for (const auto& [size, name] : kPrefixes) {
    if (std::abs(value) >= size || std::abs(other) >= size) {
      scale = size == 1e4 ? 1e3 : size;
      prefix = name;
      break;
    }
  }
  std::string text;
  for (int digits = 4; digits <= 12; ++digits) {
    text = absl::StrCat(absl::StrFormat("%.*g", digits, value / scale), prefix);
    if (absl::StrCat(absl::StrFormat("%.*g", digits, other / scale), prefix) != text) break;
  }
  return text;
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
  for (const ChartSeries& one : series) {
    for (const auto& [x, y] : one.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_min = std::min(y_min, y);
      y_max = std::max(y_max, y);
    }
  }
  const bool empty = !std::isfinite(x_min);
  if (empty) x_min = x_max = y_min = y_max = 0;
  // A flat range still gets some height, so that the line sits in the middle.
  if (x_max == x_min) x_max = x_min + 1;
  if (y_max == y_min) {
    const double pad = y_min == 0 ? 1 : std::abs(y_min) * 0.05;
    y_min -= pad;
    y_max += pad;
  }
  const double plot_width = options.width - kLeft - kRight;
  const double plot_height = options.height - kTop - kBottom;
  const auto px = [&](double x) { return kLeft + (x - x_min) / (x_max - x_min) * plot_width; };
  const auto py = [&](double y) { return kTop + (y_max - y) / (y_max - y_min) * plot_height; };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "role=\"img\" aria-label=\"%s\">\n",
      options.width, options.height, options.width, options.height, EscapeHtml(options.title));
  absl::StrAppendFormat(&svg, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", options.width,
                        options.height);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%d\" y=\"18\" class=\"title\" font-size=\"13\" font-weight=\"bold\">%s</text>\n",
                        kLeft, EscapeHtml(options.title));
  // Axes, and the ranges at their ends.
  absl::StrAppendFormat(&svg, "<path class=\"axis\" d=\"M %d %d L %d %d L %d %d\" stroke=\"#555\" fill=\"none\"/>\n",
                        kLeft, kTop, kLeft, options.height - kBottom, options.width - kRight, options.height - kBottom);
  const auto text = [&](double x, double y, const char* anchor, const std::string& label) {
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"11\" fill=\"#333\">%s</text>\n",
                          x, y, anchor, EscapeHtml(label));
  };
  if (!empty) {
    text(kLeft - 4, kTop + 4, "end", Number(y_max, y_min));
    text(kLeft - 4, options.height - kBottom, "end", Number(y_min, y_max));
    text(kLeft, options.height - kBottom + 14, "start", Number(x_min, x_max));
    text(options.width - kRight, options.height - kBottom + 14, "end", Number(x_max, x_min));
  } else {
    text(kLeft + plot_width / 2, kTop + plot_height / 2, "middle", "no values");
  }
  text(kLeft + plot_width / 2, options.height - kBottom + 14, "middle", options.x_label);

  for (size_t i = 0; i < series.size(); ++i) {
    const ChartSeries& one = series[i];
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string d;
    int points = 0;
    double first_x = 0;
    double first_y = 0;
    for (const auto& [x, y] : one.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      if (points == 0) {
        first_x = px(x);
        first_y = py(y);
      }
      absl::StrAppendFormat(&d, "%s%.2f %.2f", points == 0 ? "M " : " L ", px(x), py(y));
      ++points;
    }
    // A single point is drawn as a dot (a zero-length line would not show).
    if (points == 1) {
      absl::StrAppendFormat(&svg, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n", first_x, first_y, color);
    }
    absl::StrAppendFormat(&svg,
                          "<path class=\"series\" data-series=\"%s\" data-points=\"%d\" d=\"%s\" stroke=\"%s\" "
                          "stroke-width=\"2\" fill=\"none\"/>\n",
                          EscapeHtml(one.name), points, d, color);
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"3\" fill=\"%s\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#333\">%s</text>\n",
                          kLeft + 4.0 + 130.0 * i, options.height - 12.0, color, kLeft + 18.0 + 130.0 * i,
                          options.height - 8.0, EscapeHtml(one.name));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kiln
