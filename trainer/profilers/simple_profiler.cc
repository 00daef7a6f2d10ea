#include "trainer/profilers/simple_profiler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {
namespace {

// Python's f"{text:<width}".
std::string PadRight(absl::string_view text, size_t width) {
  std::string out(text);
  if (out.size() < width) out.append(width - out.size(), ' ');
  return out;
}

// Python's str.expandtabs() length (tab stops every 8 columns), of a line without line breaks.
size_t ExpandedLength(absl::string_view line) {
  size_t column = 0;
  for (char c : line) column = c == '\t' ? (column / 8 + 1) * 8 : column + 1;
  return column;
}

// Python's math.fsum is exact; a sum in long double is as close as a report needs.
double Sum(const std::vector<double>& values) {
  long double sum = 0;
  for (double value : values) sum += value;
  return static_cast<double>(sum);
}

}  // namespace

std::string PythonFloat5(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = absl::StrFormat("%.5g", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

SimpleProfiler::SimpleProfiler(std::string dirpath, std::string filename, bool extended)
    : Profiler(std::move(dirpath), std::move(filename)), extended_(extended), start_time_(Clock::now()) {}

void SimpleProfiler::start(absl::string_view action_name) {
  auto [it, inserted] = running_.try_emplace(action_name);
  if (inserted) it->second.start = Clock::now();
  ++it->second.depth;
}

void SimpleProfiler::stop(absl::string_view action_name) {
  const Clock::time_point end = Clock::now();
  auto it = running_.find(action_name);
  if (it == running_.end() || --it->second.depth > 0) return;
  const double seconds = std::chrono::duration<double>(end - it->second.start).count();
  running_.erase(it);
  auto [index, inserted] = index_.try_emplace(action_name, actions_.size());
  if (inserted) actions_.push_back({std::string(action_name), {}});
  actions_[index->second].durations.push_back(seconds);
}

std::string SimpleProfiler::summary() {
  const double total_duration = std::chrono::duration<double>(Clock::now() - start_time_).count();
  std::string out;
  if (!stage().empty()) absl::StrAppend(&out, absl::AsciiStrToUpper(stage()), " ");
  absl::StrAppend(&out, "Profiler Report\n");
  if (actions_.empty()) return out + "\n";
  size_t max_key = 0;
  for (const Action& action : actions_) max_key = std::max(max_key, action.name.size());
  if (extended_) {
    auto row = [&](absl::string_view action, absl::string_view mean, absl::string_view calls,
                   absl::string_view total, absl::string_view percent) {
      return absl::StrCat("\n|  ", PadRight(action, max_key), "\t|  ", PadRight(mean, 15), "\t|  ",
                          PadRight(calls, 15), "\t|  ", PadRight(total, 15), "\t|  ", PadRight(percent, 15), "\t|");
    };
    const std::string header = row("Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %");
    // Lightning measures the header with its leading line break.
    const std::string rule = absl::StrCat("\n", std::string(ExpandedLength(header.substr(1)) + 1, '-'));
    struct Line {
      const Action* action;
      double sum;
      double percent;
    };
    std::vector<Line> lines;
    int64_t total_calls = 0;
    for (const Action& action : actions_) {
      const double sum = Sum(action.durations);
      lines.push_back({&action, sum, 100.0 * sum / total_duration});
      total_calls += static_cast<int64_t>(action.durations.size());
    }
    std::stable_sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) { return a.percent > b.percent; });
    absl::StrAppend(&out, rule, header, rule);
    absl::StrAppend(&out, row("Total", "-", absl::StrCat(total_calls), PythonFloat5(total_duration), "100 %"), rule);
    for (const Line& line : lines) {
      const size_t calls = line.action->durations.size();
      absl::StrAppend(&out, row(line.action->name, PythonFloat5(line.sum / static_cast<double>(calls)),
                                absl::StrCat(calls), PythonFloat5(line.sum), PythonFloat5(line.percent)));
    }
    absl::StrAppend(&out, rule);
  } else {
    auto row = [&](absl::string_view action, absl::string_view mean, absl::string_view total) {
      return absl::StrCat("\n|  ", PadRight(action, max_key), "\t|  ", PadRight(mean, 15), "\t|  ",
                          PadRight(total, 15), "\t|");
    };
    const std::string header = row("Action", "Mean duration (s)", "Total time (s)");
    const std::string rule = absl::StrCat("\n", std::string(ExpandedLength(header.substr(1)) + 1, '-'));
    std::vector<std::pair<const Action*, double>> lines;
    for (const Action& action : actions_) lines.emplace_back(&action, Sum(action.durations));
    // Lightning sorts this table by the mean.
    std::stable_sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) {
      return a.second / a.first->durations.size() > b.second / b.first->durations.size();
    });
    absl::StrAppend(&out, rule, header, rule);
    for (const auto& [action, sum] : lines) {
      absl::StrAppend(&out, row(action->name, PythonFloat5(sum / action->durations.size()), PythonFloat5(sum)));
    }
    absl::StrAppend(&out, rule);
  }
  return out + "\n";
}

}  // namespace kiln
