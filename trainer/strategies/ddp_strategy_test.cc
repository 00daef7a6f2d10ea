// DDPStrategy (ddp_strategy.h) on its own: two real processes on this host, a Gloo process group on the CPU
// accelerator, PyTorch's reducer. Each rank's gradient is known from its own input, so the averages are checked
// against numbers worked out here.
#include "trainer/strategies/ddp_strategy.h"

#include <string>

#include "ATen/ATen.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/strategies/distributed_program.h"
#include "trainer/strategies/testing/strategy_ranks.h"

namespace kiln {
namespace {

DDPOptions Options(bool find_unused_parameters = false) {
  return DDPOptions{.timeout = absl::Seconds(60), .find_unused_parameters = find_unused_parameters};
}

TEST(DdpStrategyTest, DescribesItself) {
  DDPStrategy strategy(DDPOptions{.process_group_backend = "gloo", .find_unused_parameters = true});
  EXPECT_EQ(strategy.name(), "ddp");
  EXPECT_TRUE(strategy.IsDistributed());
  EXPECT_EQ(strategy.ProcessGroupBackend(), "gloo");
  EXPECT_TRUE(strategy.options().find_unused_parameters);
  EXPECT_EQ(strategy.options().bucket_cap_mb, 25);
  EXPECT_FALSE(DDPStrategy().ProcessGroupBackend().has_value());
}

// loss = sum(W x + b) with x all (rank + 1): rank r's dW is r + 1 everywhere and db is 1, so the average over
// 2 ranks is 1.5 and 1. In a no_sync window each rank keeps its own; the window's synced end averages the sums.
TEST(DdpStrategyTest, AveragesGradientsAcrossTheRanksExceptInANoSyncWindow) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(2);
  const int rank = strategy_testing::Rank();
  torch::manual_seed(5 + rank);
  torch::nn::Linear model(3, 1);
  DistributedProgram::Get().BeginEntryPoint("fit");
  DDPStrategy strategy(Options());
  ASSERT_TRUE(strategy.Setup(strategy_testing::ThisRankPlan("ddp"), *model).ok());
  const at::Tensor x = at::full({1, 3}, rank + 1.0);

  strategy.Backward(model->forward(x).sum(), /*sync_gradients=*/true);
  EXPECT_TRUE(at::allclose(model->weight.grad(), at::full({1, 3}, 1.5))) << model->weight.grad();
  EXPECT_TRUE(at::allclose(model->bias.grad(), at::full({1}, 1.0))) << model->bias.grad();

  // SGD(lr 1) moves every rank's copy alike: they stay equal.
  const at::Tensor before = model->weight.detach().clone();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(1.0));
  strategy.OptimizerStep(sgd);
  EXPECT_TRUE(at::allclose(model->weight, before - 1.5));

  sgd.zero_grad();
  strategy.Backward(model->forward(x).sum(), /*sync_gradients=*/false);
  EXPECT_TRUE(at::allclose(model->weight.grad(), at::full({1, 3}, rank + 1.0))) << model->weight.grad();
  strategy.Backward(model->forward(x).sum(), /*sync_gradients=*/true);
  // Rank 0 holds 1 + 1, rank 1 holds 2 + 2: the average is 3.
  EXPECT_TRUE(at::allclose(model->weight.grad(), at::full({1, 3}, 3.0))) << model->weight.grad();
  EXPECT_TRUE(strategy.Teardown().ok());
}

// A model with a layer no step uses: find_unused_parameters lets the steps go on; without it the second step fails
// with c10d's error and Kiln's fix (the strategy's name).
class TwoLayers final : public torch::nn::Module {
 public:
  TwoLayers() {
    torch::manual_seed(9);
    used = register_module("used", torch::nn::Linear(2, 1));
    unused = register_module("unused", torch::nn::Linear(2, 1));
  }
  torch::nn::Linear used{nullptr};
  torch::nn::Linear unused{nullptr};
};

TEST(DdpStrategyTest, FindUnusedParametersLetsAStepLeaveALayerOut) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(2);
  const at::Tensor x = at::ones({1, 2});
  {
    TwoLayers model;
    DistributedProgram::Get().BeginEntryPoint("fit");
    DDPStrategy strategy(Options(/*find_unused_parameters=*/true));
    ASSERT_TRUE(strategy.Setup(strategy_testing::ThisRankPlan("ddp"), model).ok());
    for (int step = 0; step < 3; ++step) {
      model.zero_grad();
      EXPECT_NO_THROW(strategy.Backward(model.used->forward(x).sum(), true)) << "step " << step;
    }
    EXPECT_TRUE(at::allclose(model.used->weight.grad(), at::ones({1, 2})));
    EXPECT_TRUE(strategy.Teardown().ok());
  }
  TwoLayers model;
  DistributedProgram::Get().BeginEntryPoint("fit");
  DDPStrategy strategy(Options(/*find_unused_parameters=*/false));
  ASSERT_TRUE(strategy.Setup(strategy_testing::ThisRankPlan("ddp"), model).ok());
  try {
    strategy.Backward(model.used->forward(x).sum(), true);
    strategy.Backward(model.used->forward(x).sum(), true);
    ADD_FAILURE() << "a second step with an unused layer and find_unused_parameters off did not fail";
  } catch (const std::exception& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("rank " + std::to_string(strategy_testing::Rank()) + " of 2"), std::string::npos)
        << message;
    EXPECT_NE(message.find("ddp_find_unused_parameters_true"), std::string::npos) << message;
  }
  EXPECT_TRUE(strategy.Teardown().ok());
}

}  // namespace
}  // namespace kiln
