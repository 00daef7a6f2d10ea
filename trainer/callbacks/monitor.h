// Shared by the monitoring callbacks (ModelCheckpoint, EarlyStopping): modes and the monitored-value lookup.
#ifndef KILN_TRAINER_CALLBACKS_MONITOR_H_
#define KILN_TRAINER_CALLBACKS_MONITOR_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "trainer/core/metrics.h"

namespace kiln {

enum class MonitorMode { kMin, kMax };

// "min" or "max"; anything else is InvalidArgument naming `owner` (e.g. "EarlyStopping").
absl::Status ParseMonitorMode(const std::string& mode, const std::string& owner, MonitorMode* out);

// True when `candidate` is better than `reference` by more than `min_delta` in `mode`.
bool Improves(double candidate, double reference, MonitorMode mode, double min_delta = 0.0);

// The comma-separated, back-quoted names in `metrics`, for "available metrics" messages.
std::string MetricNames(const MetricMap& metrics);

}  // namespace kiln

#endif  // KILN_TRAINER_CALLBACKS_MONITOR_H_
