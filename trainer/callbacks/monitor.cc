#include "trainer/callbacks/monitor.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln {

absl::Status ParseMonitorMode(const std::string& mode, const std::string& owner, MonitorMode* out) {
  if (mode == "min") {
    *out = MonitorMode::kMin;
  } else if (mode == "max") {
    *out = MonitorMode::kMax;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(owner, "(mode='", mode, "') is not valid; use 'min' or 'max'"));
  }
  return absl::OkStatus();
}

bool Improves(double candidate, double reference, MonitorMode mode, double min_delta) {
  return mode == MonitorMode::kMin ? candidate < reference - min_delta : candidate > reference + min_delta;
}

std::string MetricNames(const MetricMap& metrics) {
  std::vector<std::string> names;
  for (const auto& [name, value] : metrics) names.push_back(absl::StrCat("`", name, "`"));
  return names.empty() ? "(none)" : absl::StrJoin(names, ", ");
}

}  // namespace kiln
