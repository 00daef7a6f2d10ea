// The Strategy interface's defaults and SingleDeviceStrategy (strategy.h) on their own, on the CPU accelerator as the
// connector resolves it: no trainer, no loops. What each step should compute is worked out here from the tensors.
#include "trainer/strategies/strategy.h"

#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/strategies/testing/strategy_ranks.h"

namespace kiln {
namespace {

TEST(SingleDeviceStrategyTest, DescribesItselfToTheConnector) {
  SingleDeviceStrategy strategy;
  EXPECT_EQ(strategy.name(), "single_device");
  EXPECT_FALSE(strategy.IsDistributed());
  EXPECT_FALSE(strategy.ProcessGroupBackend().has_value());
  EXPECT_TRUE(strategy.is_global_zero());
  EXPECT_EQ(strategy.global_rank(), 0);
  EXPECT_EQ(strategy.world_size(), 1);
  EXPECT_FALSE(strategy.SavesShardedCheckpoints());
  EXPECT_FALSE(strategy.GradientOverflowAgreement());
}

TEST(SingleDeviceStrategyTest, SetsUpThePlansDeviceAndTrainsThere) {
  const Plan plan = strategy_testing::ThisRankPlan("single_device");
  ASSERT_NE(plan.accelerator, nullptr);
  torch::manual_seed(3);
  torch::nn::Linear model(4, 2);
  SingleDeviceStrategy strategy;
  ASSERT_TRUE(strategy.Setup(plan, *model).ok());
  EXPECT_EQ(strategy.root_device(), plan.root_device());
  EXPECT_EQ(model->weight.device(), plan.root_device());

  const Batch batch = strategy.BatchToDevice(Batch{.input = at::ones({3, 4}), .target = at::zeros({3, 2})});
  EXPECT_EQ(batch.input.device(), strategy.root_device());
  EXPECT_TRUE(at::equal(batch.target, at::zeros({3, 2})));

  // loss = sum(W x + b) over 3 rows of ones: dW = 3 everywhere, db = 3; SGD(lr 0.5) takes 1.5 off each.
  const at::Tensor weight = model->weight.detach().clone();
  const at::Tensor bias = model->bias.detach().clone();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.5));
  sgd.zero_grad();
  strategy.Backward(model->forward(batch.input).sum(), /*sync_gradients=*/true);
  EXPECT_TRUE(at::allclose(model->weight.grad(), at::full({2, 4}, 3.0)));
  EXPECT_TRUE(at::allclose(model->bias.grad(), at::full({2}, 3.0)));
  strategy.OptimizerStep(sgd);
  EXPECT_TRUE(at::allclose(model->weight, weight - 1.5));
  EXPECT_TRUE(at::allclose(model->bias, bias - 1.5));
  EXPECT_TRUE(strategy.Finish().ok());
  EXPECT_TRUE(strategy.Teardown().ok());
  EXPECT_TRUE(strategy.Teardown().ok());  // Twice is allowed.
}

TEST(SingleDeviceStrategyTest, ItsCollectivesAreTheValueItself) {
  SingleDeviceStrategy strategy;
  const at::Tensor value = at::arange(6, at::kFloat).reshape({2, 3});
  EXPECT_TRUE(at::equal(strategy.ReduceMean(value), value));
  EXPECT_TRUE(strategy.ReduceAny(true));
  EXPECT_FALSE(strategy.ReduceAny(false));
  const std::vector<at::Tensor> gathered = strategy.AllGather(value);
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_TRUE(at::equal(gathered[0], value));
  EXPECT_EQ(AllGatherText(strategy, "version_3"), std::vector<std::string>{"version_3"});
  EXPECT_EQ(AllGatherText(strategy, ""), std::vector<std::string>{""});
  strategy.Barrier();
}

// The hooks a strategy that keeps the whole model inherits: gradients clipped by this rank's norm, the body of a
// full-state section run as it is.
TEST(StrategyDefaultsTest, ClipByTheLocalNormAndRunTheFullStateBody) {
  SingleDeviceStrategy strategy;
  at::Tensor parameter = at::zeros({2}).requires_grad_();
  parameter.mutable_grad() = at::tensor({3.0f, 4.0f});  // Norm 5.
  strategy.ClipGradientsNorm({parameter}, 1.0);
  EXPECT_NEAR(parameter.grad().norm().item<double>(), 1.0, 1e-5);
  EXPECT_TRUE(at::allclose(parameter.grad(), at::tensor({0.6f, 0.8f}), 1e-5, 1e-5));

  EXPECT_TRUE(strategy.ConnectOptimizers({}).ok());
  int ran = 0;
  const absl::Status status = strategy.WithFullState({}, Strategy::OptimizerStateCodec{}, /*restoring=*/false, [&] {
    ++ran;
    return absl::DataLossError("from the body");
  });
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(status, absl::DataLossError("from the body"));
}

// A strategy that keeps the default AllGather serves one process and refuses more, naming itself.
class TwoProcessesWithoutAllGather final : public Strategy {
 public:
  std::string name() const override { return "mine"; }
  bool IsDistributed() const override { return true; }
  absl::Status Setup(const Plan&, torch::nn::Module&) override { return absl::OkStatus(); }
  absl::Status Teardown() override { return absl::OkStatus(); }
  c10::Device root_device() const override { return c10::Device(c10::DeviceType::CPU); }
  Batch BatchToDevice(const Batch& batch) const override { return batch; }
  void Backward(const at::Tensor& loss, bool) override { loss.backward(); }
  void OptimizerStep(torch::optim::Optimizer& optimizer) override { optimizer.step(); }
  at::Tensor ReduceMean(const at::Tensor& value) override { return value; }
  bool ReduceAny(bool decision) override { return decision; }
  bool is_global_zero() const override { return true; }
  int global_rank() const override { return 0; }
  int world_size() const override { return 2; }
  void Barrier() override {}
};

TEST(StrategyDefaultsTest, AllGatherOfAStrategyWithoutOneRefusesSeveralProcesses) {
  TwoProcessesWithoutAllGather strategy;
  try {
    strategy.AllGather(at::ones({1}));
    FAIL() << "AllGather with 2 processes returned";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("strategy 'mine' runs 2 processes but does not implement"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace kiln
