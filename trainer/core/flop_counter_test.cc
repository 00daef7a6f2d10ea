#include "trainer/core/flop_counter.h"

#include <cstdint>
#include <string>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/conv.h"
#include "torch/nn/modules/linear.h"

namespace kiln {
namespace {

constexpr int64_t kBatch = 32, kIn = 8, kHidden = 16, kOut = 3;

torch::nn::Sequential Mlp() {
  return torch::nn::Sequential(torch::nn::Linear(kIn, kHidden), torch::nn::Tanh(), torch::nn::Linear(kHidden, kOut));
}

// A matrix product of [m, k] by [k, n] is m x n dot products of length k: 2 x m x k x n FLOPs (a multiply-add is
// two). A Linear(in, out) on a batch of b is one such product (b x in by in x out); its bias costs nothing.
int64_t Product(int64_t m, int64_t k, int64_t n) { return 2 * m * k * n; }

TEST(FlopCounterTest, AnMlpsForwardIsItsTwoMatrixProducts) {
  torch::nn::Sequential mlp = Mlp();
  const at::Tensor x = at::randn({kBatch, kIn});
  absl::StatusOr<int64_t> flops = MeasureFlops([&] { mlp->forward(x); });
  ASSERT_TRUE(flops.ok()) << flops.status();
  EXPECT_EQ(*flops, Product(kBatch, kIn, kHidden) + Product(kBatch, kHidden, kOut));
}

// Backward computes, per Linear, the weight's gradient (grad^T x input: the same product's size) and, where the
// layer's input needs one, the input's gradient (grad x weight: the same size again). The first layer's input (the
// data) needs none.
TEST(FlopCounterTest, ForwardAndBackwardCountEachGradientsProduct) {
  torch::nn::Sequential mlp = Mlp();
  const at::Tensor x = at::randn({kBatch, kIn});
  FlopCounter counter;
  ASSERT_TRUE(counter.Start().ok());
  mlp->forward(x).sum().backward();
  counter.Stop();
  const int64_t first = Product(kBatch, kIn, kHidden), second = Product(kBatch, kHidden, kOut);
  EXPECT_EQ(counter.total(), /*forward=*/(first + second) + /*weights=*/(first + second) + /*input of 2nd=*/second);
  EXPECT_EQ(counter.by_operator().at("aten::addmm"), first + second);
  EXPECT_EQ(counter.by_operator().at("aten::mm"), first + 2 * second);
  // Operators run after Stop are not counted.
  mlp->forward(x);
  EXPECT_EQ(counter.total(), 2 * first + 3 * second);
}

// The rule of thumb "6 x tokens x parameters" is exact for a stack of bias-free products whose input needs its
// gradient too: forward 2 x b x weights, backward twice that.
TEST(FlopCounterTest, SixTimesBatchTimesWeightsWhenEveryInputNeedsAGradient) {
  torch::nn::Sequential mlp = Mlp();
  const at::Tensor x = at::randn({kBatch, kIn}).requires_grad_(true);
  absl::StatusOr<int64_t> flops = MeasureFlops([&] { mlp->forward(x).sum().backward(); });
  ASSERT_TRUE(flops.ok()) << flops.status();
  int64_t weights = 0;
  for (const auto& item : mlp->named_parameters()) {
    if (item.key().find("weight") != std::string::npos) weights += item.value().numel();
  }
  EXPECT_EQ(*flops, 6 * kBatch * weights);
}

// A Conv2d is, per output position, a dot product over in_channels x kernel: 2 x batch x out_h x out_w x
// out_channels x in_channels x kh x kw, counted once (not again for the _convolution it runs).
TEST(FlopCounterTest, AConvolutionCountsOnce) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 5, 3).padding(1).stride(2));
  const at::Tensor x = at::randn({4, 3, 9, 9});
  FlopCounter counter;
  ASSERT_TRUE(counter.Start().ok());
  const at::Tensor y = conv->forward(x);
  counter.Stop();
  ASSERT_EQ(y.sizes(), (at::IntArrayRef{4, 5, 5, 5}));
  EXPECT_EQ(counter.total(), 2 * 4 * 5 * 5 * 5 * 3 * 3 * 3);
  EXPECT_EQ(counter.by_operator().size(), 1u);
}

TEST(FlopCounterTest, OneCounterCountsAtATime) {
  FlopCounter first, second;
  ASSERT_TRUE(first.Start().ok());
  EXPECT_FALSE(second.Start().ok());
  EXPECT_FALSE(first.Start().ok());
  EXPECT_FALSE(MeasureFlops([] {}).ok());
  first.Stop();
  EXPECT_TRUE(second.Start().ok());
}

}  // namespace
}  // namespace kiln
