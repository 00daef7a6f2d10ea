// ParallelStrategy (parallel_strategy.h) on its own, through the smallest subclass: two real processes on this host
// meet through c10d's TCPStore, make a Gloo process group on the CPU accelerator, and use the collectives the loops
// use. The expected values are worked out from each rank's number.
#include "trainer/strategies/parallel_strategy.h"

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ATen/ATen.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/nn/modules/linear.h"
#include "trainer/strategies/distributed_program.h"
#include "trainer/strategies/testing/strategy_ranks.h"

namespace kiln {
namespace {

// The parallel base with nothing of its own: set-up joins the ranks; the step is the local one.
class BareParallelStrategy final : public ParallelStrategy {
 public:
  explicit BareParallelStrategy(std::optional<std::string> backend = std::nullopt)
      : ParallelStrategy(absl::Seconds(60), std::move(backend)) {}
  std::string name() const override { return "bare_parallel"; }
  absl::Status Setup(const Plan& plan, torch::nn::Module& model) override { return JoinProcessGroup(plan, model); }
  void Backward(const at::Tensor& loss, bool) override { loss.backward(); }
  void OptimizerStep(torch::optim::Optimizer& optimizer) override { optimizer.step(); }
  // The base's subgroups, for the test.
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> Subgroup(const std::vector<int>& ranks) {
    return MakeSubgroup(ranks, "test");
  }
};

// Each rank's model starts from its own seed; after set-up every rank holds rank 0's.
TEST(ParallelStrategyTest, JoinsTheRanksAndStartsThemFromRankZerosParameters) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(2);
  const int rank = strategy_testing::Rank();
  const Plan plan = strategy_testing::ThisRankPlan("ddp");
  ASSERT_EQ(plan.world_size, 2);
  ASSERT_EQ(plan.global_rank, rank);
  torch::manual_seed(100 + rank);
  torch::nn::Linear model(3, 2);
  DistributedProgram::Get().BeginEntryPoint("fit");
  BareParallelStrategy strategy;
  ASSERT_TRUE(strategy.Setup(plan, *model).ok());
  EXPECT_TRUE(strategy.IsDistributed());
  EXPECT_EQ(strategy.global_rank(), rank);
  EXPECT_EQ(strategy.world_size(), 2);
  EXPECT_EQ(strategy.is_global_zero(), rank == 0);
  EXPECT_EQ(strategy.root_device(), plan.root_device());

  torch::manual_seed(100);  // Rank 0's start.
  torch::nn::Linear rank_zeros(3, 2);
  EXPECT_TRUE(at::equal(model->weight, rank_zeros->weight));
  EXPECT_TRUE(at::equal(model->bias, rank_zeros->bias));
  EXPECT_TRUE(strategy.Teardown().ok());
  EXPECT_TRUE(strategy.Teardown().ok());
}

TEST(ParallelStrategyTest, ReducesGathersAndAgreesAcrossTheRanks) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(2);
  const int rank = strategy_testing::Rank();
  torch::nn::Linear model(1, 1);
  DistributedProgram::Get().BeginEntryPoint("fit");
  BareParallelStrategy strategy;
  ASSERT_TRUE(strategy.Setup(strategy_testing::ThisRankPlan("ddp"), *model).ok());

  // Ranks 0 and 1 log 1 and 4: the mean is 2.5 on both, in the value's own type.
  const at::Tensor mean = strategy.ReduceMean(at::full({2}, rank == 0 ? 1.0f : 4.0f));
  EXPECT_EQ(mean.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(mean, at::full({2}, 2.5f)));

  // Values of different lengths come back whole, in rank order.
  const std::vector<at::Tensor> gathered = strategy.AllGather(at::arange(rank + 1, at::kLong) + 10 * rank);
  ASSERT_EQ(gathered.size(), 2u);
  EXPECT_TRUE(at::equal(gathered[0], at::tensor({0}, at::kLong)));
  EXPECT_TRUE(at::equal(gathered[1], at::tensor({10, 11}, at::kLong)));
  EXPECT_EQ(AllGatherText(strategy, rank == 0 ? "version_0" : "x"), (std::vector<std::string>{"version_0", "x"}));

  EXPECT_TRUE(strategy.ReduceAny(rank == 1));
  EXPECT_FALSE(strategy.ReduceAny(false));
  strategy.Barrier();

  // Through the store, from a thread beside this one's collectives (a checkpoint writer's): every rank's text in rank
  // order, round after round (three: the third removes this rank's key of the first).
  std::vector<std::vector<std::string>> exchanged;
  std::thread writer([&] {
    for (int round = 0; round < 3; ++round) {
      exchanged.push_back(strategy.ExchangeThroughStore("a test", absl::StrCat("rank ", rank, ", round ", round)));
    }
  });
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(strategy.ReduceAny(rank == 1));
  writer.join();
  ASSERT_EQ(exchanged.size(), 3u);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(exchanged[round], (std::vector<std::string>{absl::StrCat("rank 0, round ", round),
                                                          absl::StrCat("rank 1, round ", round)}));
  }

  // A subgroup of rank 1 alone: an all-reduce in it sees rank 1's value only.
  if (rank == 1) {
    absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> alone = strategy.Subgroup({1});
    ASSERT_TRUE(alone.ok()) << alone.status();
    std::vector<at::Tensor> value = {at::full({1}, 7.0f)};
    (*alone)->allreduce(value)->wait();
    EXPECT_EQ(value[0].item<float>(), 7.0f);
  }
  strategy.Barrier();
  EXPECT_TRUE(strategy.Teardown().ok());
}

// Refusals before any peer is needed: no main port, a backend the accelerator does not bring.
TEST(ParallelStrategyTest, RefusesAPlanWithoutAMainPortOrWithAnUnknownBackend) {
  Plan plan = strategy_testing::ThisRankPlan("ddp");
  ASSERT_NE(plan.accelerator, nullptr);
  plan.main_port.reset();
  torch::nn::Linear model(1, 1);
  BareParallelStrategy strategy;
  absl::Status status = strategy.Setup(plan, *model);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(status.message(), "bare_parallel needs a main port")) << status;
  EXPECT_TRUE(strategy.Teardown().ok());

  plan.process_group_backend = "no_such_backend";
  BareParallelStrategy other;
  status = other.Setup(plan, *model);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(status.message(), "process group backend 'no_such_backend' is not available for "
                                                  "accelerator 'cpu'"))
      << status;
  EXPECT_TRUE(other.Teardown().ok());
}

}  // namespace
}  // namespace kiln
