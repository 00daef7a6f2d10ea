#include "trainer/core/data_loader.h"

#include <set>
#include <string>
#include <vector>

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

TEST(TensorDataLoaderTest, NamedTensorsMakeDictionaryBatchesShardedAndShuffledAlike) {
  const at::Tensor ids = at::arange(20, at::kLong).reshape({10, 2});
  const at::Tensor labels = at::arange(10, at::kLong) * 10;
  TensorDataLoader loader({{"input_ids", ids}, {"labels", labels}},
                          {.batch_size = 2, .shuffle = true, .seed = 4});
  ASSERT_TRUE(loader.set_shard(1, 2).ok());
  loader.set_epoch(3);
  TensorDataLoader plain(ids, labels, {.batch_size = 2, .shuffle = true, .seed = 4});
  ASSERT_TRUE(plain.set_shard(1, 2).ok());
  plain.set_epoch(3);
  ASSERT_EQ(loader.num_batches(), plain.num_batches());
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    const Batch named = loader.get_batch(i);
    const Batch reference = plain.get_batch(i);
    ASSERT_TRUE(named.structured());
    EXPECT_FALSE(named.input.defined());
    EXPECT_TRUE(named["input_ids"].equal(reference.input)) << "the same rows as input/target batches";
    EXPECT_TRUE(named["labels"].equal(reference.target));
    EXPECT_EQ(named.size(), reference.size());
    // The names in the order given.
    std::vector<std::string> keys;
    for (const auto& entry : named.data.toGenericDict()) keys.push_back(entry.key().toStringRef());
    EXPECT_EQ(keys, (std::vector<std::string>{"input_ids", "labels"}));
  }
  EXPECT_THROW(TensorDataLoader({{"a", at::zeros({3})}, {"b", at::zeros({4})}}, {}), c10::Error);
  EXPECT_THROW(TensorDataLoader({{"a", at::zeros({3})}, {"a", at::zeros({3})}}, {}), c10::Error);
  try {
    loader.get_batch(0)["mask"];
    FAIL() << "a missing key was found";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("its keys are: input_ids, labels"), std::string::npos)
        << e.what_without_backtrace();
  }
}

TEST(BatchTest, MapTensorsReachesEveryTensorOfANestedStructureAndKeepsTheRest) {
  c10::impl::GenericDict inner(c10::StringType::get(), c10::AnyType::get());
  inner.insert("boxes", at::ones({3, 4}));
  inner.insert("name", std::string("detector"));
  c10::impl::GenericList list(c10::AnyType::get());
  list.push_back(at::zeros({3}));
  list.push_back(c10::IValue(7));
  c10::impl::GenericDict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("image", at::rand({3, 2, 2}));
  top.insert("targets", inner);
  top.insert("extra", list);
  top.insert("pair", c10::ivalue::Tuple::create({at::ones({3, 1}), c10::IValue()}));
  Batch batch;
  batch.data = top;
  EXPECT_EQ(batch.size(), 3);
  EXPECT_EQ(BatchTensors(batch).size(), 4u);
  const Batch moved = MapTensors(batch, [](const at::Tensor& tensor) { return tensor.to(c10::Device("meta")); });
  const std::vector<at::Tensor> tensors = BatchTensors(moved);
  ASSERT_EQ(tensors.size(), 4u);
  for (const at::Tensor& tensor : tensors) EXPECT_TRUE(tensor.is_meta());
  const c10::impl::GenericDict result = moved.data.toGenericDict();
  EXPECT_EQ(result.at("targets").toGenericDict().at("name").toStringRef(), "detector");
  EXPECT_EQ(result.at("extra").toListRef()[1].toInt(), 7);
  EXPECT_TRUE(result.at("pair").toTupleRef().elements()[1].isNone());
  EXPECT_TRUE(batch["image"].is_cpu()) << "the original is left as it was";
  const Batch plain{at::zeros({5, 2}), at::Tensor()};
  EXPECT_EQ(plain.size(), 5) << "input/target batches as before";
}

}  // namespace
}  // namespace kiln
