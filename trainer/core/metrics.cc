#include "trainer/core/metrics.h"

#include "ATen/ATen.h"
#include "c10/util/Exception.h"

namespace kiln {

void MetricCollector::Log(const std::string& name, const at::Tensor& value, const LogOptions& options,
                          int64_t batch_size) {
  TORCH_CHECK(value.numel() == 1, "log('", name, "'): expected a scalar, got a tensor of shape ", value.sizes());
  const bool on_step = options.on_step.value_or(training_);
  const bool on_epoch = options.on_epoch.value_or(!training_);
  const at::Tensor scalar = value.detach();
  if (on_step) {
    const std::string step_name = on_epoch ? name + "_step" : name;
    step_values_[step_name] = scalar;
    step_sync_dist_[step_name] = options.sync_dist;
    if (options.prog_bar) latest_progress_[name] = scalar;
  }
  if (on_epoch) {
    Accumulator& accumulator = epoch_[on_step ? name + "_epoch" : name];
    accumulator.values.push_back(scalar);
    accumulator.weights.push_back(static_cast<double>(batch_size));
    accumulator.count += batch_size;
    accumulator.prog_bar = options.prog_bar;
    accumulator.sync_dist = options.sync_dist;
  }
}

double MetricCollector::Accumulator::Mean() const {
  const at::Tensor stacked = at::stack(values).reshape({-1}).to(at::kDouble);
  const at::Tensor weight = at::tensor(weights, at::TensorOptions().dtype(at::kDouble)).to(stacked.device());
  return (stacked * weight).sum().item<double>() / static_cast<double>(count);
}

std::map<std::string, MetricCollector::EpochTotal> MetricCollector::SyncedEpochTotals() const {
  std::map<std::string, EpochTotal> totals;
  for (const auto& [name, accumulator] : epoch_) {
    if (!accumulator.sync_dist || accumulator.count == 0) continue;
    const double mean = accumulator.Mean();
    totals[name] = {mean * static_cast<double>(accumulator.count), static_cast<double>(accumulator.count)};
  }
  return totals;
}

MetricMap MetricCollector::SyncedStepValues() const {
  MetricMap values;
  for (const auto& [name, value] : step_values_) {
    if (auto found = step_sync_dist_.find(name); found != step_sync_dist_.end() && found->second) {
      values[name] = value.item<double>();
    }
  }
  return values;
}

bool MetricCollector::HasSyncedStepValues() const {
  for (const auto& [name, synced] : step_sync_dist_) {
    if (synced && step_values_.count(name) > 0) return true;
  }
  return false;
}

MetricMap MetricCollector::StepMetrics() const {
  MetricMap metrics;
  for (const auto& [name, value] : step_values_) metrics[name] = value.item<double>();
  return metrics;
}

MetricMap MetricCollector::TakeStepMetrics() {
  MetricMap metrics = StepMetrics();
  step_values_.clear();
  step_sync_dist_.clear();
  return metrics;
}

MetricMap MetricCollector::ProgressBarMetrics() const {
  MetricMap metrics;
  for (const auto& [name, value] : latest_progress_) metrics[name] = value.item<double>();
  for (const auto& [name, accumulator] : epoch_) {
    if (accumulator.prog_bar && accumulator.count > 0) metrics[name] = accumulator.Mean();
  }
  return metrics;
}

MetricMap MetricCollector::EpochMetrics() const {
  MetricMap metrics;
  for (const auto& [name, accumulator] : epoch_) {
    if (accumulator.count > 0) metrics[name] = accumulator.Mean();
  }
  return metrics;
}

void MetricCollector::ResetEpoch() {
  epoch_.clear();
  latest_progress_.clear();
}

}  // namespace kiln
