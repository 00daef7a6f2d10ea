#include "trainer/loops/rank_agreement.h"

#include <map>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/str_cat.h"
#include "trainer/loops/call_user.h"

namespace kiln {

MetricMap GlobalMetrics(Strategy& strategy, const MetricCollector& metrics, MetricMap local, bool steps) {
  if (strategy.world_size() <= 1) return local;
  const std::map<std::string, MetricCollector::EpochTotal> totals = metrics.SyncedEpochTotals();
  const MetricMap step_values = steps ? metrics.SyncedStepValues() : MetricMap();
  if (totals.empty() && step_values.empty()) return local;
  std::vector<double> packed;
  for (const auto& [name, total] : totals) {
    packed.push_back(total.weighted_sum);
    packed.push_back(total.weight);
  }
  for (const auto& [name, value] : step_values) packed.push_back(value);
  // The mean of the sums over the mean of the weights is the global weighted mean.
  const at::Tensor mean = strategy.ReduceMean(at::tensor(packed, at::TensorOptions().dtype(at::kDouble))).cpu();
  const double* reduced = mean.data_ptr<double>();
  size_t i = 0;
  for (const auto& [name, total] : totals) {
    if (local.count(name) > 0) local[name] = reduced[i] / reduced[i + 1];
    i += 2;
  }
  for (const auto& [name, value] : step_values) {
    if (local.count(name) > 0) local[name] = reduced[i];
    ++i;
  }
  return local;
}

absl::Status CheckNoEmptyShard(Strategy& strategy, int64_t batches, absl::string_view what) {
  if (strategy.world_size() <= 1) return absl::OkStatus();
  bool some_empty = false;
  bool some_full = false;
  absl::Status agreed = CallUser("agreeing on the batches of every rank", [&] {
    some_empty = strategy.ReduceAny(batches == 0);
    some_full = strategy.ReduceAny(batches > 0);
  });
  if (!agreed.ok()) return agreed;
  if (some_empty && some_full) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " data has fewer batches than the ", strategy.world_size(),
        " processes (some ranks have none); give it at least one example per process, or run on fewer devices"));
  }
  return absl::OkStatus();
}

absl::Status ShardLoaders(const Strategy& strategy, const std::vector<DataLoader*>& loaders) {
  for (DataLoader* loader : loaders) {
    if (loader == nullptr) continue;
    if (absl::Status status = loader->set_shard(strategy.global_rank(), strategy.world_size()); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln
