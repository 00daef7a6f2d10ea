// FSDPStrategy (fsdp_strategy.h) on its own: two real processes on this host, a Gloo process group on the CPU
// accelerator. Each rank computes on its own batch; one step of SGD under fsdp must leave every rank with the model
// one process gets from the mean of the two batches' losses, worked out here without any strategy.
#include "trainer/strategies/fsdp_strategy.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/strategies/distributed_program.h"
#include "trainer/strategies/testing/strategy_ranks.h"

namespace kiln {
namespace {

// Three Linear units: two elements of a Sequential (5 x 3 + 3 = 18 and 3 x 1 + 1 = 4 parameters) and the head (1 x 1
// + 1), a member the model calls itself; the root unit keeps nothing.
class Net final : public torch::nn::Module {
 public:
  Net() {
    torch::manual_seed(21);
    blocks = register_module("blocks", torch::nn::Sequential(torch::nn::Linear(5, 3), torch::nn::Tanh(),
                                                             torch::nn::Linear(3, 1)));
    head = register_module("head", torch::nn::Linear(1, 1));
  }
  at::Tensor forward(const at::Tensor& x) { return head->forward(blocks->forward(x)); }
  torch::nn::Sequential blocks{nullptr};
  torch::nn::Linear head{nullptr};
};

at::Tensor Batch(int rank) {
  at::Generator generator = at::detail::createCPUGenerator(40 + rank);
  return at::randn({4, 5}, generator, at::kFloat);
}

at::Tensor Loss(Net& net, const at::Tensor& x) { return net.forward(x).pow(2).mean(); }

TEST(FsdpStrategyTest, DescribesItselfFromItsOptions) {
  FSDPStrategy plain;
  EXPECT_EQ(plain.name(), "fsdp");
  EXPECT_TRUE(plain.IsDistributed());
  EXPECT_FALSE(plain.SavesShardedCheckpoints());
  EXPECT_TRUE(plain.GradientOverflowAgreement() != nullptr);
  FSDPStrategy offloaded(FSDPOptions{.cpu_offload = true, .state_dict_type = StateDictType::kSharded});
  EXPECT_EQ(offloaded.name(), "fsdp_cpu_offload");
  EXPECT_TRUE(offloaded.SavesShardedCheckpoints());
  EXPECT_EQ(offloaded.options().sharding_strategy, ShardingStrategy::kFullShard);
}

TEST(FsdpStrategyTest, RefusesCpuOffloadWithNoShardBeforeJoining) {
  Net net;
  FSDPStrategy strategy(FSDPOptions{.sharding_strategy = ShardingStrategy::kNoShard, .cpu_offload = true});
  const absl::Status status = strategy.Setup(strategy_testing::ThisRankPlan("fsdp"), net);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "NO_SHARD shards nothing; use FULL_SHARD or SHARD_GRAD_OP"))
      << status;
  EXPECT_TRUE(strategy.Teardown().ok());
}

// The step every sharding strategy must take alike: the mean gradient of the two ranks' batches, applied by each
// rank to its shard, the model whole again afterwards.
TEST(FsdpStrategyTest, OneStepOnShardsEndsWhereOneProcessEnds) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(2);
  const int rank = strategy_testing::Rank();

  Net reference;
  torch::optim::SGD reference_sgd(reference.parameters(), torch::optim::SGDOptions(0.5));
  ((Loss(reference, Batch(0)) + Loss(reference, Batch(1))) / 2).backward();
  reference_sgd.step();

  for (ShardingStrategy sharding :
       {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard}) {
    SCOPED_TRACE(ShardingStrategyName(sharding));
    Net net;
    DistributedProgram::Get().BeginEntryPoint("fit");
    FSDPStrategy strategy(FSDPOptions{.timeout = absl::Seconds(60),
                                      .sharding_strategy = sharding,
                                      .auto_wrap_policy = {.module_types = {"Linear"}}});
    ASSERT_TRUE(strategy.Setup(strategy_testing::ThisRankPlan("fsdp"), net).ok());

    // The two Linear units of `blocks`, the head's (a member: gathered when its forward reads it) and an empty root:
    // each rank keeps half of each unit, or (NO_SHARD) every unit whole.
    const auto& flats = strategy.flat_parameters();
    ASSERT_EQ(flats.size(), 4u);
    EXPECT_EQ(flats[3], nullptr);
    for (size_t unit = 0; unit < 3; ++unit) {
      const auto& flat = flats[unit];
      ASSERT_NE(flat, nullptr);
      EXPECT_EQ(flat->sharded(), sharding != ShardingStrategy::kNoShard) << flat->name();
      if (flat->sharded()) {
        EXPECT_EQ(flat->padded_numel() % 2, 0) << flat->name();
        EXPECT_EQ(flat->shard().numel(), flat->padded_numel() / 2) << flat->name();
      }
    }
    EXPECT_EQ(flats[0]->numel(), 5 * 3 + 3);
    EXPECT_EQ(flats[1]->numel(), 3 * 1 + 1);
    EXPECT_EQ(flats[2]->numel(), 1 * 1 + 1);
    EXPECT_EQ(flats[2]->name(), "head");

    auto sgd = std::make_shared<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.5));
    ASSERT_TRUE(strategy.ConnectOptimizers({sgd}).ok());
    sgd->zero_grad();
    strategy.Backward(Loss(net, Batch(rank)), /*sync_gradients=*/true);
    strategy.OptimizerStep(*sgd);
    ASSERT_TRUE(strategy.Finish().ok());

    const auto expected = reference.named_parameters();
    for (const auto& item : net.named_parameters()) {
      const at::Tensor& want = expected[item.key()];
      EXPECT_TRUE(at::allclose(item.value(), want, 1e-5, 1e-5))
          << item.key() << " on rank " << rank << ":\n" << item.value() << "\nwanted\n" << want;
    }
    EXPECT_TRUE(strategy.Teardown().ok());
  }
}

// Clipping by norm takes the norm over every rank's shard: the whole gradient's norm, not this rank's half.
TEST(FsdpStrategyTest, ClipsByTheNormOfTheWholeGradient) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(2);
  const int rank = strategy_testing::Rank();
  Net reference;
  ((Loss(reference, Batch(0)) + Loss(reference, Batch(1))) / 2).backward();
  double squares = 0;
  for (const at::Tensor& parameter : reference.parameters()) squares += parameter.grad().pow(2).sum().item<double>();
  const double whole_norm = std::sqrt(squares);

  Net net;
  DistributedProgram::Get().BeginEntryPoint("fit");
  FSDPStrategy strategy(FSDPOptions{.timeout = absl::Seconds(60), .auto_wrap_policy = {.module_types = {"Linear"}}});
  ASSERT_TRUE(strategy.Setup(strategy_testing::ThisRankPlan("fsdp"), net).ok());
  auto sgd = std::make_shared<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(1.0));
  ASSERT_TRUE(strategy.ConnectOptimizers({sgd}).ok());
  sgd->zero_grad();
  strategy.Backward(Loss(net, Batch(rank)), /*sync_gradients=*/true);
  // What the optimizer steps: the shards' gradients. Clipped to a tenth of the whole norm, they shrink by 10.
  std::vector<at::Tensor> stepped;
  for (const auto& group : sgd->param_groups()) {
    for (const at::Tensor& parameter : group.params()) stepped.push_back(parameter);
  }
  double before = 0;
  for (const at::Tensor& parameter : stepped) {
    if (parameter.grad().defined()) before += parameter.grad().pow(2).sum().item<double>();
  }
  strategy.ClipGradientsNorm(stepped, whole_norm / 10);
  double after = 0;
  for (const at::Tensor& parameter : stepped) {
    if (parameter.grad().defined()) after += parameter.grad().pow(2).sum().item<double>();
  }
  EXPECT_NEAR(std::sqrt(after), std::sqrt(before) / 10, 1e-4 * std::sqrt(before));
  ASSERT_TRUE(strategy.Finish().ok());
  EXPECT_TRUE(strategy.Teardown().ok());
}

}  // namespace
}  // namespace kiln
