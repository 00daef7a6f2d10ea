// FSDPStrategy (fsdp_strategy.h) on its own: two real processes on this host, a Gloo process group on the CPU
// accelerator. Each rank computes on its own batch; one step of SGD under fsdp must leave every rank with the model
// one process gets from the mean of the two batches' losses, worked out here without any strategy.
#include "trainer/strategies/fsdp_strategy.h"

#include <cmath>
#include <memory>
#include <optional>
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

// Mixed precision (FSDPOptions::mixed_precision): what one process gets from the same step computed its way, worked
// out here without any strategy (the derived reference). Each rank computes its batch's gradient with the parameters
// cast to param_dtype (bfloat16): the same kernels on the same bits as the reference's bfloat16 copy, so the same
// gradient bits. The reduction divides each rank's gradient by 2 and sums the two in reduce_dtype (Gloo's sum of two
// is one rounding, which adding two tensors of that type also is; the order of two terms does not change a sum); the
// result, cast to float32, is the shard's gradient, and SGD steps the float32 shard. So every parameter must end bit
// for bit where the reference ends, for bfloat16 and float32 reductions alike, and in float32.
TEST(FsdpStrategyTest, MixedPrecisionComputesInParamDtypeAndStepsFloat32Shards) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(2);
  const int rank = strategy_testing::Rank();
  constexpr double kLr = 0.5;
  struct Case {
    const char* name;
    ShardingStrategy sharding;
    bool offload;
    FsdpDtype reduce;
  };
  for (const Case& c : {Case{"FULL_SHARD, bf16 reduce", ShardingStrategy::kFullShard, false, FsdpDtype::kBFloat16},
                        Case{"SHARD_GRAD_OP, fp32 reduce", ShardingStrategy::kShardGradOp, false, FsdpDtype::kFloat32},
                        Case{"FULL_SHARD, cpu_offload", ShardingStrategy::kFullShard, true, FsdpDtype::kBFloat16}}) {
    SCOPED_TRACE(c.name);
    // The reference: a bfloat16 copy computes each rank's gradient; they are reduced in the reduce type.
    Net master;
    Net low;
    {
      at::NoGradGuard no_grad;
      low.to(at::kBFloat16);
    }
    const at::ScalarType reduce = c.reduce == FsdpDtype::kBFloat16 ? at::kBFloat16 : at::kFloat;
    std::vector<std::vector<at::Tensor>> grads;
    for (int r = 0; r < 2; ++r) {
      for (auto& parameter : low.parameters()) parameter.mutable_grad().reset();
      Loss(low, Batch(r).to(at::kBFloat16)).backward();
      grads.emplace_back();
      for (const auto& parameter : low.parameters()) grads.back().push_back(parameter.grad().to(reduce));
    }
    {
      at::NoGradGuard no_grad;
      auto parameters = master.parameters();
      for (size_t i = 0; i < parameters.size(); ++i) {
        const at::Tensor mean = (grads[0][i] / 2 + grads[1][i] / 2).to(at::kFloat);
        parameters[i].sub_(mean * kLr);
      }
    }

    Net net;
    net.register_buffer("scale", at::ones({2}));
    DistributedProgram::Get().BeginEntryPoint("fit");
    FSDPStrategy strategy(FSDPOptions{.timeout = absl::Seconds(60),
                                      .sharding_strategy = c.sharding,
                                      .auto_wrap_policy = {.module_types = {"Linear"}},
                                      .cpu_offload = c.offload,
                                      .mixed_precision = {.param_dtype = FsdpDtype::kBFloat16,
                                                          .reduce_dtype = c.reduce,
                                                          .buffer_dtype = FsdpDtype::kBFloat16}});
    ASSERT_TRUE(strategy.Setup(strategy_testing::ThisRankPlan("fsdp"), net).ok());
    EXPECT_EQ(net.named_buffers()["scale"].scalar_type(), at::kBFloat16);
    const auto& flats = strategy.flat_parameters();
    ASSERT_EQ(flats.size(), 4u);  // The three Linear units; the root keeps nothing.
    EXPECT_EQ(flats[3], nullptr);
    for (const auto& flat : flats) {
      if (flat == nullptr) continue;
      EXPECT_TRUE(flat->mixed_precision()) << flat->name();
      EXPECT_EQ(flat->shard().scalar_type(), at::kFloat) << flat->name();
      EXPECT_EQ(flat->compute_dtype(), at::kBFloat16) << flat->name();
      EXPECT_EQ(flat->reduce_dtype(), reduce) << flat->name();
    }
    // The batch's input comes to the model in param_dtype (its target as it was).
    const kiln::Batch moved = strategy.BatchToDevice(kiln::Batch{.input = Batch(rank), .target = at::zeros({4, 1})});
    EXPECT_EQ(moved.input.scalar_type(), at::kBFloat16);
    EXPECT_EQ(moved.target.scalar_type(), at::kFloat);

    auto sgd = std::make_shared<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(kLr));
    ASSERT_TRUE(strategy.ConnectOptimizers({sgd}).ok());
    sgd->zero_grad();
    strategy.Backward(Loss(net, moved.input), /*sync_gradients=*/true);
    for (const auto& flat : flats) {
      if (flat == nullptr) continue;
      ASSERT_TRUE(flat->shard().grad().defined()) << flat->name();
      EXPECT_EQ(flat->shard().grad().scalar_type(), at::kFloat) << flat->name();
      EXPECT_EQ(flat->shard().grad().device(), flat->shard().device()) << flat->name();
    }
    strategy.OptimizerStep(*sgd);
    ASSERT_TRUE(strategy.Finish().ok());
    EXPECT_EQ(net.named_buffers()["scale"].scalar_type(), at::kFloat);  // Put back.

    const auto expected = master.named_parameters();
    for (const auto& item : net.named_parameters()) {
      const at::Tensor& want = expected[item.key()];
      EXPECT_EQ(item.value().scalar_type(), at::kFloat) << item.key();
      EXPECT_TRUE(at::equal(item.value(), want))
          << item.key() << " on rank " << rank << ":\n" << item.value() << "\nwanted\n" << want;
    }
    EXPECT_TRUE(strategy.Teardown().ok());
  }
}

// The memory of a gathered unit, measured through FlatParameter: bfloat16 parameters take half of float32's. Under
// SHARD_GRAD_OP a unit stays gathered from its forward to its backward: measured there.
TEST(FsdpStrategyTest, MixedPrecisionHalvesTheGatheredUnit) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(2);
  std::vector<int64_t> bytes;
  for (std::optional<FsdpDtype> dtype : {std::optional<FsdpDtype>(), std::optional<FsdpDtype>(FsdpDtype::kBFloat16)}) {
    Net net;
    DistributedProgram::Get().BeginEntryPoint("fit");
    FSDPStrategy strategy(FSDPOptions{.timeout = absl::Seconds(60),
                                      .sharding_strategy = ShardingStrategy::kShardGradOp,
                                      .auto_wrap_policy = {.module_types = {"Linear"}},
                                      .mixed_precision = {.param_dtype = dtype}});
    ASSERT_TRUE(strategy.Setup(strategy_testing::ThisRankPlan("fsdp"), net).ok());
    const FlatParameter& unit = *strategy.flat_parameters()[0];
    EXPECT_EQ(unit.gathered_bytes(), 0);  // Resharded after Setup.
    auto sgd = std::make_shared<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1));
    ASSERT_TRUE(strategy.ConnectOptimizers({sgd}).ok());
    const at::Tensor loss = Loss(net, strategy.BatchToDevice(kiln::Batch{.input = Batch(0)}).input);
    bytes.push_back(unit.gathered_bytes());
    EXPECT_EQ(unit.members()[0].parameter.scalar_type(), dtype ? at::kBFloat16 : at::kFloat);
    strategy.Backward(loss, /*sync_gradients=*/true);
    EXPECT_EQ(unit.gathered_bytes(), 0);  // Freed after its backward.
    ASSERT_TRUE(strategy.Finish().ok());
    EXPECT_TRUE(strategy.Teardown().ok());
  }
  // The first unit, Linear(5, 3): 18 parameters, padded to 18 (a multiple of 2): 72 bytes in float32.
  EXPECT_EQ(bytes[0], 18 * 4);
  EXPECT_EQ(bytes[1], bytes[0] / 2);
}

TEST(FsdpStrategyTest, RefusesMixedPrecisionWithNoShardBeforeJoining) {
  Net net;
  FSDPStrategy strategy(FSDPOptions{.sharding_strategy = ShardingStrategy::kNoShard,
                                    .mixed_precision = {.param_dtype = FsdpDtype::kBFloat16}});
  const absl::Status status = strategy.Setup(strategy_testing::ThisRankPlan("fsdp"), net);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "mixed precision (param_dtype bfloat16)")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "NO_SHARD shards nothing; use FULL_SHARD or SHARD_GRAD_OP"))
      << status;
  EXPECT_TRUE(strategy.Teardown().ok());
}

}  // namespace
}  // namespace kiln
