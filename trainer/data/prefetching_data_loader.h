// PrefetchingDataLoader: wraps a DataLoader and prepares the next batches on a background thread while the loop
// trains on the current one, so that the device does not wait for batches to be gathered or copied.
//
// It yields exactly the batches the wrapped loader yields (same tensors, same order): it only moves the calls to
// `get_batch` onto another thread, in index order, up to `depth` batches ahead of the loop. Asking for an index out
// of sequence (resuming mid-epoch, or a loop that skips) restarts the read-ahead from that index.
//
// Thread-safety: like any DataLoader, used by one thread at a time. The wrapped loader's `get_batch` runs on the
// background thread (data_loader.h allows it once `set_epoch` has returned); set_epoch and num_batches run on the
// caller's. An exception thrown by the wrapped `get_batch` is rethrown by `get_batch` for that index.
#ifndef KILN_TRAINER_DATA_PREFETCHING_DATA_LOADER_H_
#define KILN_TRAINER_DATA_PREFETCHING_DATA_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "trainer/core/data_loader.h"

namespace kiln {

class PrefetchingDataLoader final : public DataLoader {
 public:
  // `depth` >= 1: how many batches may wait, ready, ahead of the loop.
  PrefetchingDataLoader(std::shared_ptr<DataLoader> inner, int64_t depth);
  ~PrefetchingDataLoader() override;
  PrefetchingDataLoader(const PrefetchingDataLoader&) = delete;
  PrefetchingDataLoader& operator=(const PrefetchingDataLoader&) = delete;

  int64_t num_batches() const override { return inner_->num_batches(); }
  void set_epoch(int64_t epoch) override;
  Batch get_batch(int64_t index) override;
  absl::Status set_shard(int rank, int world_size) override;

  const std::shared_ptr<DataLoader>& inner() const { return inner_; }

 private:
  void StopWorker();
  void StartWorker(int64_t first);
  void Run(int64_t first);

  const std::shared_ptr<DataLoader> inner_;
  const int64_t depth_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<int64_t, Batch>> ready_;  // Consecutive indices, oldest first.
  std::exception_ptr error_;                     // What the wrapped loader threw for error_index_.
  int64_t error_index_ = -1;
  int64_t next_index_ = -1;  // The index the running worker expects to be asked for next; -1: no worker.
  bool stop_ = false;
};

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_PREFETCHING_DATA_LOADER_H_
