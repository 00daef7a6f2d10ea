#include "trainer/models/model_summary.h"

#include "gtest/gtest.h"
#include "trainer/models/conv_net.h"
#include "trainer/models/mlp.h"

namespace kiln {
namespace {

TEST(ModelSummaryTest, HumanReadableCountsLikeLightning) {
  EXPECT_EQ(HumanReadableCount(0), "0");
  EXPECT_EQ(HumanReadableCount(999), "999");
  EXPECT_EQ(HumanReadableCount(1234), "1.2 K");
  EXPECT_EQ(HumanReadableCount(123456), "123 K");
  EXPECT_EQ(HumanReadableCount(2000000), "2.0 M");
  EXPECT_EQ(HumanReadableCount(3000000000), "3.0 B");
}

TEST(ModelSummaryTest, ConvNetRowsAndTotals) {
  const ConvNetSizes sizes{.input_shape = {1, 8, 8}, .channels = {16, 32}, .kernel_size = 3, .num_outputs = 10};
  ConvNet net(sizes, {});
  // Conv weights in*out*k*k plus out biases; two 2x2 poolings take 8x8 to 2x2 before the linear layer.
  const int64_t conv = (1 * 16 * 9 + 16) + (16 * 32 * 9 + 32);
  const int64_t linear = 32 * 2 * 2 * 10 + 10;
  ModelSummary summary = Summarize(net);
  ASSERT_EQ(summary.layers.size(), 2u);
  EXPECT_EQ(summary.layers[0].name, "features");
  EXPECT_EQ(summary.layers[0].type, "Sequential");
  EXPECT_EQ(summary.layers[0].parameters, conv);
  EXPECT_EQ(summary.layers[1].parameters, linear);
  EXPECT_EQ(summary.trainable_parameters, conv + linear);
  EXPECT_EQ(summary.non_trainable_parameters, 0);
  EXPECT_DOUBLE_EQ(summary.size_megabytes, (conv + linear) * 4 / 1e6);

  ModelSummary deeper = Summarize(net, 2);
  ASSERT_GT(deeper.layers.size(), 2u);
  EXPECT_EQ(deeper.layers[1].name, "features.0");
  EXPECT_EQ(deeper.layers[1].type, "Conv2d");
  EXPECT_EQ(deeper.layers[1].parameters, 1 * 16 * 9 + 16);
}

TEST(ModelSummaryTest, TableReadsLikeLightnings) {
  Mlp mlp({.input_size = 16, .hidden_sizes = {64}, .num_outputs = 4}, {});
  const int64_t total = 16 * 64 + 64 + 64 * 4 + 4;  // 1348.
  mlp.named_parameters()["net.0.bias"].set_requires_grad(false);
  const std::string table = Summarize(mlp).ToString();
  EXPECT_NE(table.find("  | Name | Type       | Params\n"), std::string::npos) << table;
  EXPECT_NE(table.find("0 | net  | Sequential | 1.3 K\n"), std::string::npos) << table;
  EXPECT_NE(table.find("1.3 K     Trainable params\n"), std::string::npos) << table;
  EXPECT_NE(table.find("64        Non-trainable params\n"), std::string::npos) << table;
  EXPECT_NE(table.find(HumanReadableCount(total) + "     Total params\n"), std::string::npos) << table;
  EXPECT_NE(table.find("0.005     Total estimated model params size (MB)\n"), std::string::npos) << table;
}

}  // namespace
}  // namespace kiln
