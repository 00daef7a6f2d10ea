// ModelParallelStrategy (model_parallel_strategy.h) and the tensor-parallel layers (trainer/core/tensor_parallel.h)
// on their own: the mesh's shape and groups, and each layer at tp = 2 inside a real 2 x 2 mesh of four processes on
// Gloo, against the plain LibTorch computation made from the same seed on every rank (the reference values are
// LibTorch's own, computed here; the layers agree with them up to the order of float sums, hence allclose).
#include "trainer/strategies/model_parallel_strategy.h"

#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "absl/time/time.h"
#include "c10/util/Exception.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/linear.h"
#include "trainer/core/device_mesh.h"
#include "trainer/core/tensor_parallel.h"
#include "trainer/strategies/distributed_program.h"
#include "trainer/strategies/testing/strategy_ranks.h"

namespace kiln {
namespace {

TEST(ModelParallelStrategyTest, MeshShapeIsLightningsAutoOrTheGivenSizes) {
  struct Case {
    std::optional<int> dp, tp;
    int world, nodes, devices;
    int want_dp, want_tp;
  };
  for (const Case& c : std::vector<Case>{{std::nullopt, std::nullopt, 4, 1, 4, 1, 4},
                                         {std::nullopt, std::nullopt, 4, 2, 2, 2, 2},
                                         {2, 2, 4, 1, 4, 2, 2},
                                         {4, 1, 4, 1, 4, 4, 1},
                                         {2, std::nullopt, 8, 2, 4, 2, 4}}) {
    absl::StatusOr<std::pair<int, int>> shape = ModelParallelStrategy::MeshShape(
        ModelParallelOptions{.data_parallel_size = c.dp, .tensor_parallel_size = c.tp}, c.world, c.nodes, c.devices);
    ASSERT_TRUE(shape.ok()) << shape.status();
    EXPECT_EQ(shape->first, c.want_dp);
    EXPECT_EQ(shape->second, c.want_tp);
  }
}

TEST(ModelParallelStrategyTest, RefusesAMeshWhoseProductIsNotTheWorldSize) {
  absl::StatusOr<std::pair<int, int>> shape = ModelParallelStrategy::MeshShape(
      ModelParallelOptions{.data_parallel_size = 3, .tensor_parallel_size = 2}, 4, 1, 4);
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kFailedPrecondition);
  for (const char* part : {"data_parallel_size=3", "tensor_parallel_size=2", "is 6", "4 processes", "product is 4"}) {
    EXPECT_NE(shape.status().message().find(part), std::string::npos) << part << " in " << shape.status();
  }
  // "auto" on one side says so.
  shape = ModelParallelStrategy::MeshShape(ModelParallelOptions{.tensor_parallel_size = 3}, 4, 1, 4);
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find("data_parallel_size=1 (auto: num_nodes)"), std::string::npos)
      << shape.status();
}

TEST(ModelParallelStrategyTest, ParsesSizes) {
  EXPECT_FALSE(ParseParallelSize("tensor_parallel_size", "auto")->has_value());
  EXPECT_EQ(ParseParallelSize("tensor_parallel_size", "4")->value(), 4);
  for (const char* bad : {"0", "-1", "two", ""}) {
    absl::StatusOr<std::optional<int>> size = ParseParallelSize("tensor_parallel_size", bad);
    ASSERT_FALSE(size.ok()) << bad;
    EXPECT_NE(size.status().message().find("\"auto\" or a positive number"), std::string::npos) << size.status();
  }
}

TEST(DeviceMeshTest, GroupsAreRowsAndColumnsOfTheGrid) {
  using Groups = std::vector<std::vector<int>>;
  EXPECT_EQ(DeviceMesh::GroupRanks(2, 2, DeviceMesh::kTensorParallel), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(DeviceMesh::GroupRanks(2, 2, DeviceMesh::kDataParallel), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(DeviceMesh::GroupRanks(3, 2, DeviceMesh::kDataParallel), (Groups{{0, 2, 4}, {1, 3, 5}}));
  EXPECT_EQ(DeviceMesh::GroupRanks(1, 4, DeviceMesh::kTensorParallel), (Groups{{0, 1, 2, 3}}));
  EXPECT_THROW(DeviceMesh::GroupRanks(2, 2, "pipeline_parallel"), c10::ValueError);
  const DeviceMesh mesh(2, 3, 5, nullptr, nullptr);
  EXPECT_EQ(mesh.local_rank(DeviceMesh::kDataParallel), 1);
  EXPECT_EQ(mesh.local_rank(DeviceMesh::kTensorParallel), 2);
  EXPECT_EQ(mesh.size(), 6);
  EXPECT_THROW(DeviceMesh(2, 2, 4, nullptr, nullptr), c10::ValueError);
}

TEST(TensorParallelTest, WithoutAGroupTheLayersAreLinear) {
  torch::manual_seed(3);
  torch::nn::Linear plain(5, 4);
  torch::manual_seed(3);
  ColumnParallelLinear column(ColumnParallelLinearOptions(5, 4));
  EXPECT_TRUE(at::equal(column->weight, plain->weight));
  EXPECT_TRUE(at::equal(column->bias, plain->bias));
  const at::Tensor x = at::randn({2, 5});
  EXPECT_TRUE(at::equal(column(x), plain(x)));
  EXPECT_TRUE(TensorParallelShards(*column).empty());
}

// Runs `body` on each of four ranks inside a 2 x 2 mesh made by the strategy.
template <typename Body>
void InMesh(Body body) {
  DistributedProgram::Get().BeginEntryPoint("fit");
  ModelParallelStrategy strategy(ModelParallelOptions{.timeout = absl::Seconds(60), .data_parallel_size = 2,
                                                      .tensor_parallel_size = 2});
  const absl::Status ready = strategy.SetupEnvironment(strategy_testing::ThisRankPlan("model_parallel"));
  ASSERT_TRUE(ready.ok()) << ready;
  const std::shared_ptr<const DeviceMesh> mesh = strategy.device_mesh();
  ASSERT_NE(mesh, nullptr);
  EXPECT_EQ(mesh->tensor_parallel_rank(), strategy_testing::Rank() % 2);
  EXPECT_EQ(mesh->data_parallel_rank(), strategy_testing::Rank() / 2);
  EXPECT_EQ(strategy.data_parallel_rank(), strategy_testing::Rank() / 2);
  EXPECT_EQ(strategy.data_parallel_size(), 2);
  body(*mesh);
  EXPECT_TRUE(strategy.Teardown().ok());
}

bool Close(const at::Tensor& a, const at::Tensor& b) { return at::allclose(a, b, 1e-5, 1e-6); }

TEST(TensorParallelTest, ParallelLayersEqualThePlainOnesForwardAndBackward) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(4);
  InMesh([](const DeviceMesh& mesh) {
    const ProcessGroupPtr tp = mesh.tensor_parallel_group();
    const int r = mesh.tensor_parallel_rank();
    // Column-parallel, gathered: the whole output, this rank's rows of W, and the whole input gradient.
    torch::manual_seed(11);
    torch::nn::Linear plain(6, 4);
    torch::manual_seed(11);
    ColumnParallelLinear column(ColumnParallelLinearOptions(6, 4).gather_output(true), tp);
    EXPECT_TRUE(at::equal(column->weight, plain->weight.narrow(0, 2 * r, 2)));
    ASSERT_EQ(TensorParallelShards(*column).size(), 2u);
    const at::Tensor x = at::randn({3, 6}).requires_grad_(true);
    const at::Tensor x_plain = x.detach().clone().requires_grad_(true);
    const at::Tensor weights = at::randn({3, 4});  // The same on every rank: made after the same seed.
    (column(x) * weights).sum().backward();
    const at::Tensor y_plain = plain(x_plain);
    (y_plain * weights).sum().backward();
    EXPECT_TRUE(Close(column(x), y_plain));
    EXPECT_TRUE(Close(x.grad(), x_plain.grad())) << x.grad() << x_plain.grad();
    EXPECT_TRUE(Close(column->weight.grad(), plain->weight.grad().narrow(0, 2 * r, 2)));

    // Row-parallel from the whole input: this rank's columns of W, the bias once, the whole input gradient.
    torch::manual_seed(12);
    torch::nn::Linear plain_row(4, 3);
    torch::manual_seed(12);
    RowParallelLinear row(RowParallelLinearOptions(4, 3).input_is_parallel(false), tp);
    EXPECT_TRUE(at::equal(row->weight, plain_row->weight.narrow(1, 2 * r, 2)));
    const at::Tensor u = at::randn({5, 4}).requires_grad_(true);
    const at::Tensor u_plain = u.detach().clone().requires_grad_(true);
    const at::Tensor v = at::randn({5, 3});
    const at::Tensor out = row(u);
    const at::Tensor out_plain = plain_row(u_plain);
    EXPECT_TRUE(Close(out, out_plain)) << out << out_plain;
    (out * v).sum().backward();
    (out_plain * v).sum().backward();
    EXPECT_TRUE(Close(u.grad(), u_plain.grad()));
    EXPECT_TRUE(Close(row->weight.grad(), plain_row->weight.grad().narrow(1, 2 * r, 2)));
    EXPECT_TRUE(Close(row->bias.grad(), plain_row->bias.grad()));

    // Attention: heads split across the two ranks, against the same block on one rank (no group).
    torch::manual_seed(13);
    ParallelSelfAttention whole(8, 4);
    torch::manual_seed(13);
    ParallelSelfAttention split(8, 4, tp);
    const at::Tensor s = at::randn({2, 5, 8}).requires_grad_(true);
    const at::Tensor s_whole = s.detach().clone().requires_grad_(true);
    const at::Tensor attended = split(s);
    const at::Tensor attended_whole = whole(s_whole);
    EXPECT_TRUE(Close(attended, attended_whole));
    attended.pow(2).sum().backward();
    attended_whole.pow(2).sum().backward();
    EXPECT_TRUE(Close(s.grad(), s_whole.grad()));
    EXPECT_TRUE(Close(split->query->weight.grad(), whole->query->weight.grad().narrow(0, 4 * r, 4)));
    EXPECT_TRUE(Close(split->out->weight.grad(), whole->out->weight.grad().narrow(1, 4 * r, 4)));
  });
}

TEST(TensorParallelTest, ReduceScatterAndItsGather) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(4);
  InMesh([](const DeviceMesh& mesh) {
    const int r = mesh.tensor_parallel_rank();
    // Rank t of the group holds (t + 1) * [0..7]; the sum over the group is 3 * [0..7], each rank keeping 4 rows.
    const at::Tensor x = (at::arange(8, at::kFloat) * (r + 1)).reshape({8, 1}).requires_grad_(true);
    const at::Tensor part = ReduceScatterToTensorParallelRegion(x, mesh.tensor_parallel_group());
    EXPECT_TRUE(at::equal(part, (at::arange(8, at::kFloat) * 3).reshape({8, 1}).narrow(0, 4 * r, 4))) << part;
    // Backward gathers: rank t's gradient is (t + 1) on its rows, so every rank gets [1 x4, 2 x4].
    (part * (r + 1)).sum().backward();
    const at::Tensor want = at::cat({at::full({4, 1}, 1.0), at::full({4, 1}, 2.0)});
    EXPECT_TRUE(at::equal(x.grad(), want)) << x.grad();
  });
}

TEST(TensorParallelTest, RefusesSizesTheGroupDoesNotDivide) {
  if (!strategy_testing::IsRank()) return strategy_testing::RunThisTestAsRanks(4);
  InMesh([](const DeviceMesh& mesh) {
    const ProcessGroupPtr tp = mesh.tensor_parallel_group();
    try {
      ColumnParallelLinear(ColumnParallelLinearOptions(4, 5), tp);
      ADD_FAILURE() << "out_features 5 at tp 2 was accepted";
    } catch (const c10::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("out_features (5) must be a multiple of the tensor-parallel group's size "
                                           "(2)"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(RowParallelLinear(RowParallelLinearOptions(3, 4), tp), c10::ValueError);
    EXPECT_THROW(ParallelSelfAttention(9, 3, tp), c10::ValueError);  // 3 heads over 2 ranks.
  });
}

}  // namespace
}  // namespace kiln
