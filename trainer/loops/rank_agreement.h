// What the loops agree on across the processes of a distributed run, through the strategy's collectives: metrics
// logged with sync_dist, whether some ranks have no batches, and each rank's shard of a loader. With one process
// each is a no-op that needs no collective. Every rank must call them at the same point of its loop.
#ifndef KILN_TRAINER_LOOPS_RANK_AGREEMENT_H_
#define KILN_TRAINER_LOOPS_RANK_AGREEMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/metrics.h"
#include "trainer/strategies/strategy.h"

namespace kiln {

// `local` with every value logged with sync_dist replaced by its value over all processes (metrics.h), combined by
// its reduce_fx: epoch means weighted by each process's examples, sums, maxima and minima over the processes'; with
// `steps`, step values alike. One mean over processes for the means and sums, and one gather when there are maxima
// or minima. Throws when a collective fails.
MetricMap GlobalMetrics(Strategy& strategy, const MetricCollector& metrics, MetricMap local, bool steps);

// An error on every rank when some ranks have `batches` 0 and others not (`what` names the data): those would have
// nothing to gather or reduce while the others wait.
absl::Status CheckNoEmptyShard(Strategy& strategy, int64_t batches, absl::string_view what);

// Gives each loader (null ones are skipped) this rank's shard (DataLoader::set_shard) of the strategy's data-parallel
// split (Strategy::data_parallel_rank and _size: the processes, but under model_parallel the data-parallel groups).
absl::Status ShardLoaders(const Strategy& strategy, const std::vector<DataLoader*>& loaders);

}  // namespace kiln

#endif  // KILN_TRAINER_LOOPS_RANK_AGREEMENT_H_
