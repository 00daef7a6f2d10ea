#include "trainer/data/prefetching_data_loader.h"

#include "c10/util/Exception.h"

namespace kiln {

PrefetchingDataLoader::PrefetchingDataLoader(std::shared_ptr<DataLoader> inner, int64_t depth)
    : inner_(std::move(inner)), depth_(depth) {
  TORCH_CHECK(inner_ != nullptr, "PrefetchingDataLoader needs a loader to wrap");
  TORCH_CHECK(depth_ >= 1, "PrefetchingDataLoader: depth must be >= 1, got ", depth_);
}

PrefetchingDataLoader::~PrefetchingDataLoader() { StopWorker(); }

void PrefetchingDataLoader::StopWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
  ready_.clear();
  error_ = nullptr;
  error_index_ = -1;
  next_index_ = -1;
  stop_ = false;
}

void PrefetchingDataLoader::StartWorker(int64_t first) {
  next_index_ = first;
  worker_ = std::thread([this, first] { Run(first); });
}

void PrefetchingDataLoader::Run(int64_t first) {
  const int64_t end = inner_->num_batches();
  for (int64_t index = first; index < end; ++index) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || static_cast<int64_t>(ready_.size()) < depth_; });
      if (stop_) return;
    }
    Batch batch;
    try {
      batch = inner_->get_batch(index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      error_index_ = index;
      changed_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.emplace_back(index, std::move(batch));
    changed_.notify_all();
  }
}

void PrefetchingDataLoader::set_epoch(int64_t epoch) {
  StopWorker();
  inner_->set_epoch(epoch);
}

absl::Status PrefetchingDataLoader::set_shard(int rank, int world_size) {
  StopWorker();  // Batches read ahead belong to the old shard.
  return inner_->set_shard(rank, world_size);
}

Batch PrefetchingDataLoader::get_batch(int64_t index) {
  TORCH_CHECK(index >= 0 && index < num_batches(), "batch index ", index, " out of range [0, ", num_batches(), ")");
  if (index != next_index_) {
    StopWorker();
    StartWorker(index);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || error_index_ == index; });
  if (ready_.empty()) {
    std::exception_ptr error = error_;
    lock.unlock();
    StopWorker();
    std::rethrow_exception(error);
  }
  Batch batch = std::move(ready_.front().second);
  ready_.pop_front();
  next_index_ = index + 1;
  lock.unlock();
  changed_.notify_all();
  return batch;
}

}  // namespace kiln
