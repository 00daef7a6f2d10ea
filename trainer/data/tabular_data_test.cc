#include "trainer/data/tabular_data.h"

#include <set>

#include "ATen/ATen.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

CsvTable Table(int64_t rows) {
  CsvTable table;
  table.source = "table.csv";
  table.feature_names = {"a", "b"};
  table.features = at::stack({at::arange(rows, at::kFloat), at::full({rows}, 3.f)}, 1);
  table.labels = at::arange(rows, at::kLong).remainder(2);
  table.class_names = {"0", "1"};
  return table;
}

TEST(TabularDataTest, SplitsBySeedAndFractionWithoutOverlap) {
  absl::StatusOr<std::unique_ptr<TabularData>> data =
      TabularData::Create(Table(100), {.val_fraction = 0.25, .batch_size = 10, .seed = 3, .normalize = false});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->num_train(), 75);
  EXPECT_EQ((*data)->num_val(), 25);
  EXPECT_EQ((*data)->num_outputs(), 2);
  // Row ids from column a: train and val together are every row exactly once.
  std::set<float> ids;
  for (auto loader : {(*data)->train_dataloader(), (*data)->val_dataloader()}) {
    loader->set_epoch(0);
    for (int64_t i = 0; i < loader->num_batches(); ++i) {
      at::Tensor a = loader->get_batch(i).input.select(1, 0);
      for (int64_t j = 0; j < a.size(0); ++j) EXPECT_TRUE(ids.insert(a[j].item<float>()).second);
    }
  }
  EXPECT_EQ(ids.size(), 100u);

  // The same seed gives the same split; another seed another one.
  auto again = TabularData::Create(Table(100), {.val_fraction = 0.25, .batch_size = 10, .seed = 3, .normalize = false});
  auto other = TabularData::Create(Table(100), {.val_fraction = 0.25, .batch_size = 10, .seed = 4, .normalize = false});
  EXPECT_TRUE((*again)->val_dataloader()->get_batch(0).input.equal((*data)->val_dataloader()->get_batch(0).input));
  EXPECT_FALSE((*other)->val_dataloader()->get_batch(0).input.equal((*data)->val_dataloader()->get_batch(0).input));
}

TEST(TabularDataTest, StandardisesWithTrainingStatistics) {
  auto data = TabularData::Create(Table(101), {.val_fraction = 0.0, .batch_size = 101, .shuffle = false});
  ASSERT_TRUE(data.ok()) << data.status();
  at::Tensor x = (*data)->train_dataloader()->get_batch(0).input;
  EXPECT_NEAR(x.select(1, 0).mean().item<float>(), 0.f, 1e-5);
  EXPECT_NEAR(x.select(1, 0).std().item<float>(), 1.f, 1e-5);
  EXPECT_TRUE(x.select(1, 1).eq(0).all().item<bool>());  // A constant feature is only centred.
  EXPECT_EQ((*data)->val_dataloader(), nullptr);

  ASSERT_TRUE((*data)->set_predict_features(at::tensor({50.f, 3.f}).reshape({1, 2})).ok());
  EXPECT_NEAR((*data)->predict_dataloader()->get_batch(0).input[0][0].item<float>(), 0.f, 1e-5);
  EXPECT_FALSE((*data)->set_predict_features(at::zeros({1, 3})).ok());
}

TEST(TabularDataTest, RejectsBadOptionsNamingThem) {
  EXPECT_NE(TabularData::Create(Table(10), {.val_fraction = 1.0})
                .status()
                .message()
                .find("val_fraction=1 is not valid; pass a fraction in [0.0, 1.0)"),
            std::string::npos);
  EXPECT_NE(TabularData::Create(Table(1), {.val_fraction = 0.6}).status().message().find("leaves no training rows"),
            std::string::npos);
  CsvTable unlabeled = Table(4);
  unlabeled.labels = at::Tensor();
  EXPECT_FALSE(TabularData::Create(unlabeled, {}).ok());
}

}  // namespace
}  // namespace kiln
