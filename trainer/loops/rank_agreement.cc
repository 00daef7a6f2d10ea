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
  const std::map<std::string, Reduce> step_reduces =
      steps ? metrics.SyncedStepReduces() : std::map<std::string, Reduce>();
  if (totals.empty() && step_values.empty()) return local;
  // Every value in one of two collectives, the same on every rank (the names are the same): means and sums in one
  // mean over processes (a sum is the mean times the processes), maxima and minima in one gather.
  struct Entry {
    std::string name;
    Reduce reduce;
    size_t slot;  // In `averaged` (kMean: two slots, the weighted sum and the weight) or in `gathered`.
  };
  std::vector<Entry> entries;
  std::vector<double> averaged;
  std::vector<double> gathered;
  const auto add = [&](const std::string& name, Reduce reduce, double value, double weight) {
    if (reduce == Reduce::kMax || reduce == Reduce::kMin) {
      entries.push_back({name, reduce, gathered.size()});
      gathered.push_back(value);
      return;
    }
    entries.push_back({name, reduce, averaged.size()});
    averaged.push_back(value);
    if (reduce == Reduce::kMean) averaged.push_back(weight);
  };
  for (const auto& [name, total] : totals) add(name, total.reduce, total.weighted_sum, total.weight);
  for (const auto& [name, value] : step_values) {
    const auto found = step_reduces.find(name);
    const Reduce reduce = found != step_reduces.end() ? found->second : Reduce::kMean;
    add(name, reduce, value, 1.0);
  }
  const at::TensorOptions doubles = at::TensorOptions().dtype(at::kDouble);
  at::Tensor mean;
  if (!averaged.empty()) mean = strategy.ReduceMean(at::tensor(averaged, doubles)).cpu().contiguous();
  at::Tensor all;  // [ranks, values]
  if (!gathered.empty()) all = at::stack(strategy.AllGather(at::tensor(gathered, doubles))).cpu();
  const double processes = static_cast<double>(strategy.world_size());
  for (const Entry& entry : entries) {
    if (local.count(entry.name) == 0) continue;
    switch (entry.reduce) {
      case Reduce::kMean:
        // The mean of the sums over the mean of the weights is the global weighted mean.
        local[entry.name] = mean[entry.slot].item<double>() / mean[entry.slot + 1].item<double>();
        break;
      case Reduce::kSum:
        local[entry.name] = mean[entry.slot].item<double>() * processes;
        break;
      case Reduce::kMax:
        local[entry.name] = all.select(1, entry.slot).max().item<double>();
        break;
      case Reduce::kMin:
        local[entry.name] = all.select(1, entry.slot).min().item<double>();
        break;
    }
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
    if (absl::Status status = loader->set_shard(strategy.data_parallel_rank(), strategy.data_parallel_size()); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln
