#include "trainer/data/prefetching_data_loader.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "trainer/data/prefetching_data_module.h"
#include "trainer/synthetic_data.h"

namespace kiln {
namespace {

// A loader whose get_batch is slow and records which thread ran it; it can be told to throw for one index.
class SlowLoader final : public DataLoader {
 public:
  explicit SlowLoader(std::shared_ptr<DataLoader> inner) : inner_(std::move(inner)) {}
  int64_t num_batches() const override { return inner_->num_batches(); }
  void set_epoch(int64_t epoch) override { inner_->set_epoch(epoch); }
  Batch get_batch(int64_t index) override {
    if (index == throw_at) throw std::runtime_error("bad batch " + std::to_string(index));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (std::this_thread::get_id() != caller) ++background_calls;
    return inner_->get_batch(index);
  }
  std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> background_calls{0};
  int64_t throw_at = -1;

 private:
  std::shared_ptr<DataLoader> inner_;
};

std::shared_ptr<TensorDataLoader> Shuffled() {
  at::Tensor x = at::arange(200, at::kFloat).reshape({100, 2});
  at::Tensor y = at::arange(100, at::kLong);
  return std::make_shared<TensorDataLoader>(x, y, TensorDataLoaderOptions{.batch_size = 8, .shuffle = true, .seed = 7});
}

TEST(PrefetchingDataLoaderTest, YieldsExactlyTheSynchronousBatchesEveryEpoch) {
  auto reference = Shuffled();
  auto slow = std::make_shared<SlowLoader>(Shuffled());
  PrefetchingDataLoader prefetching(slow, 3);
  ASSERT_EQ(prefetching.num_batches(), reference->num_batches());
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    reference->set_epoch(epoch);
    prefetching.set_epoch(epoch);
    for (int64_t i = 0; i < reference->num_batches(); ++i) {
      Batch expected = reference->get_batch(i);
      Batch got = prefetching.get_batch(i);
      ASSERT_TRUE(expected.input.equal(got.input)) << "epoch " << epoch << " batch " << i;
      ASSERT_TRUE(expected.target.equal(got.target)) << "epoch " << epoch << " batch " << i;
    }
  }
  // The batches really came from another thread.
  EXPECT_EQ(slow->background_calls.load(), 3 * reference->num_batches());
}

TEST(PrefetchingDataLoaderTest, OutOfSequenceIndicesRestartTheReadAhead) {
  auto reference = Shuffled();
  PrefetchingDataLoader prefetching(std::make_shared<SlowLoader>(Shuffled()), 2);
  reference->set_epoch(1);
  prefetching.set_epoch(1);
  for (int64_t i : {5, 6, 2, 12, 0, 1}) {  // Resuming mid-epoch, then going back.
    EXPECT_TRUE(reference->get_batch(i).target.equal(prefetching.get_batch(i).target)) << i;
  }
  EXPECT_THROW(prefetching.get_batch(13), c10::Error);
}

TEST(PrefetchingDataLoaderTest, RethrowsTheWrappedLoadersErrorForItsIndex) {
  auto slow = std::make_shared<SlowLoader>(Shuffled());
  slow->throw_at = 4;
  PrefetchingDataLoader prefetching(slow, 4);
  prefetching.set_epoch(0);
  for (int64_t i = 0; i < 4; ++i) EXPECT_NO_THROW(prefetching.get_batch(i));
  EXPECT_THROW(
      {
        try {
          prefetching.get_batch(4);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "bad batch 4");
          throw;
        }
      },
      std::runtime_error);
  slow->throw_at = -1;
  EXPECT_NO_THROW(prefetching.get_batch(4));  // Recovers: the read-ahead restarts.
}

TEST(PrefetchingDataLoaderTest, DestroyingMidEpochStopsTheWorker) {
  auto slow = std::make_shared<SlowLoader>(Shuffled());
  {
    PrefetchingDataLoader prefetching(slow, 2);
    prefetching.get_batch(0);
  }
  const int calls = slow->background_calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(slow->background_calls.load(), calls);
  EXPECT_LE(calls, 3);  // The batch asked for, and at most depth more.
}

TEST(PrefetchingDataModuleTest, WrapsEveryLoaderOnceWithTheSameBatches) {
  SyntheticOptions options;
  options.num_train = 300;
  options.num_val = 100;
  auto reference = std::make_shared<SyntheticClusters>(options);
  PrefetchingDataModule prefetching(std::make_shared<SyntheticClusters>(options), 2);
  auto train = prefetching.train_dataloader();
  EXPECT_EQ(train, prefetching.train_dataloader());
  EXPECT_NE(dynamic_cast<PrefetchingDataLoader*>(train.get()), nullptr);
  EXPECT_EQ(prefetching.test_dataloader(), prefetching.val_dataloader());  // SyntheticClusters shares one loader.
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    reference->train_dataloader()->set_epoch(epoch);
    train->set_epoch(epoch);
    for (int64_t i = 0; i < train->num_batches(); ++i) {
      ASSERT_TRUE(reference->train_dataloader()->get_batch(i).input.equal(train->get_batch(i).input));
    }
  }
}

}  // namespace
}  // namespace kiln
