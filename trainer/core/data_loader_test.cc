#include "trainer/core/data_loader.h"

#include <set>

#include "ATen/ATen.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

at::Tensor Range(int64_t n) { return at::arange(n, at::TensorOptions().dtype(at::kLong)); }

TEST(TensorDataLoaderTest, BatchesInOrderWithAPartialLastBatch) {
  TensorDataLoader loader(Range(10).unsqueeze(1), Range(10), {.batch_size = 4});
  ASSERT_EQ(loader.num_batches(), 3);
  EXPECT_TRUE(loader.get_batch(0).target.equal(at::tensor({0, 1, 2, 3}, at::kLong)));
  EXPECT_EQ(loader.get_batch(2).size(), 2);
  EXPECT_THROW(loader.get_batch(3), c10::Error);
}

TEST(TensorDataLoaderTest, DropLast) {
  TensorDataLoader loader(Range(10), Range(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.num_batches(), 2);
}

TEST(TensorDataLoaderTest, ShardsPadForTrainingAndHoldEachExampleOnceForEvaluation) {
  // 5 examples over 2 ranks: training pads to 6 (example 0 twice), evaluation splits 3 + 2.
  const auto shard = [](bool even, int rank) {
    TensorDataLoader loader(Range(5), Range(5), {.batch_size = 8, .even_shards = even});
    EXPECT_TRUE(loader.set_shard(rank, 2).ok());
    return loader.get_batch(0).target;
  };
  EXPECT_TRUE(shard(true, 0).equal(at::tensor({0, 2, 4}, at::kLong)));
  EXPECT_TRUE(shard(true, 1).equal(at::tensor({1, 3, 0}, at::kLong)));
  EXPECT_TRUE(shard(false, 0).equal(at::tensor({0, 2, 4}, at::kLong)));
  EXPECT_TRUE(shard(false, 1).equal(at::tensor({1, 3}, at::kLong)));
}

TEST(TensorDataLoaderTest, ShufflesAsAFunctionOfSeedAndEpoch) {
  const auto epoch_order = [](uint64_t seed, int64_t epoch) {
    TensorDataLoader loader(Range(32), Range(32), {.batch_size = 32, .shuffle = true, .seed = seed});
    loader.set_epoch(epoch);
    return loader.get_batch(0).target;
  };
  at::Tensor a = epoch_order(7, 0);
  EXPECT_TRUE(a.equal(epoch_order(7, 0))) << "same seed and epoch must give the same order";
  EXPECT_FALSE(a.equal(epoch_order(7, 1))) << "a new epoch must reshuffle";
  EXPECT_FALSE(a.equal(epoch_order(8, 0)));
  EXPECT_FALSE(a.equal(Range(32)));
  // A permutation: every example exactly once.
  EXPECT_TRUE(std::get<0>(at::sort(a)).equal(Range(32)));
}

TEST(TensorDataLoaderTest, InputsAndTargetsStayAligned) {
  TensorDataLoader loader(Range(16) * 10, Range(16), {.batch_size = 5, .shuffle = true, .seed = 3});
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    Batch batch = loader.get_batch(i);
    EXPECT_TRUE(batch.input.equal(batch.target * 10));
  }
}

TEST(TensorDataLoaderTest, RejectsMismatchedTensors) {
  EXPECT_THROW(TensorDataLoader(Range(4), Range(5), {}), c10::Error);
  EXPECT_THROW(TensorDataLoader(Range(4), Range(4), {.batch_size = 0}), c10::Error);
}

}  // namespace
}  // namespace kiln
