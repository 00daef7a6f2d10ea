#include "trainer/core/meta_device.h"

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "torch/nn/module.h"
#include "torch/nn/modules/batchnorm.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/conv.h"
#include "torch/nn/modules/embedding.h"
#include "torch/nn/modules/linear.h"
#include "torch/nn/modules/normalization.h"
#include "torch/utils.h"

namespace kiln {
namespace {

TEST(MetaDeviceScopeTest, FactoriesWithoutADeviceMakeMetaTensors) {
  MetaDeviceScope meta;
  EXPECT_TRUE(MetaDeviceScope::active());
  for (const at::Tensor& made : {at::empty({2, 3}), at::zeros({4}), at::ones({4}), at::full({2}, 7.0), at::randn({5}),
                                 at::rand({5}), at::arange(6), at::randint(10, {3})}) {
    EXPECT_TRUE(made.is_meta()) << made.sizes();
  }
  // A device given explicitly is kept (as under Python's torch.device context).
  EXPECT_TRUE(at::zeros({2}, at::device(at::kCPU)).device().is_cpu());
  // An operator on a meta tensor gives a meta tensor; one on host tensors computes on the host.
  EXPECT_TRUE((at::ones({2}) + 1).is_meta());
  const at::Tensor host = at::ones({2}, at::device(at::kCPU));
  EXPECT_EQ((host + 1).sum().item<float>(), 4.0f);
}

TEST(MetaDeviceScopeTest, OnlyItsThreadAndOnlyWhileOpen) {
  {
    MetaDeviceScope meta;
    bool other_thread_meta = true;
    std::thread([&] { other_thread_meta = at::zeros({2}).is_meta(); }).join();
    EXPECT_FALSE(other_thread_meta);
    {
      MetaDeviceScope nested;
      EXPECT_TRUE(at::zeros({2}).is_meta());
    }
    EXPECT_TRUE(at::zeros({2}).is_meta());  // The inner scope closing leaves the outer one open.
  }
  EXPECT_FALSE(MetaDeviceScope::active());
  EXPECT_TRUE(at::zeros({2}).device().is_cpu());
}

// A module whose constructor draws its own parameter (no reset()), and takes a slice of a larger draw, as a
// tensor-parallel layer does (tensor_parallel.h).
struct HandMadeImpl : torch::nn::Module {
  HandMadeImpl() {
    scale = register_parameter("scale", at::randn({3, 5}) * 0.5);
    slice = register_parameter("slice", at::randn({8, 4}).narrow(0, 2, 3).clone());
    register_buffer("steps", at::zeros({1}, at::kLong));
  }
  at::Tensor scale, slice;
};
TORCH_MODULE(HandMade);

struct NetImpl : torch::nn::Module {
  NetImpl() {
    embedding = register_module("embedding", torch::nn::Embedding(11, 6));
    body = register_module(
        "body", torch::nn::Sequential(torch::nn::Linear(6, 7), torch::nn::LayerNorm(torch::nn::LayerNormOptions({7})),
                                      torch::nn::Conv1d(7, 4, 3), torch::nn::BatchNorm1d(4)));
    hand = register_module("hand", HandMade());
    head = register_module("head", torch::nn::Linear(6, 11));
  }
  torch::nn::Embedding embedding{nullptr};
  torch::nn::Sequential body{nullptr};
  HandMade hand{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Net);

std::vector<std::pair<std::string, at::Tensor>> State(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (const auto& item : module.named_parameters()) state.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) state.emplace_back(item.key(), item.value());
  return state;
}

TEST(MetaDeviceScopeTest, MaterialisedValuesEqualANormalConstructionsBitForBit) {
  torch::manual_seed(7);
  Net normal;
  const at::Tensor after_normal = at::rand({4});  // Where the generator stands after the construction.
  torch::manual_seed(7);
  Net net = [] {
    MetaDeviceScope meta;
    return Net();
  }();
  ASSERT_TRUE(HasMetaTensors(*net));
  for (const auto& [name, tensor] : State(*net)) EXPECT_TRUE(tensor.is_meta()) << name;
  std::vector<const c10::TensorImpl*> identities;
  for (const auto& [name, tensor] : State(*net)) identities.push_back(tensor.unsafeGetTensorImpl());

  ASSERT_TRUE(MaterializeMetaTensors(*net).ok());
  EXPECT_FALSE(HasMetaTensors(*net));
  EXPECT_TRUE(at::equal(at::rand({4}),
                        after_normal));  // It drew exactly what the normal construction drew.
  const auto expected = State(*normal);
  const auto got = State(*net);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, expected[i].first);
    EXPECT_EQ(got[i].second.unsafeGetTensorImpl(), identities[i]) << got[i].first << " is still the module's own";
    EXPECT_TRUE(got[i].second.device().is_cpu()) << got[i].first;
    EXPECT_TRUE(at::equal(got[i].second, expected[i].second)) << got[i].first;
    EXPECT_EQ(got[i].second.requires_grad(), expected[i].second.requires_grad()) << got[i].first;
  }
}

// The caller gets each tensor as soon as its value is final, while the later ones are still on the meta device: FSDP
// shards each unit then, so the whole model is never on the host.
TEST(MetaDeviceScopeTest, ReadyGivesEachTensorWhileTheLaterOnesAreStillMeta) {
  torch::nn::Sequential net = [] {
    MetaDeviceScope meta;
    return torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Linear(4, 4), torch::nn::Linear(4, 4));
  }();
  std::vector<int> meta_left;
  std::vector<const c10::TensorImpl*> seen;
  ASSERT_TRUE(MaterializeMetaTensors(*net, [&](const at::Tensor& tensor) {
                EXPECT_TRUE(tensor.device().is_cpu());
                seen.push_back(tensor.unsafeGetTensorImpl());
                int left = 0;
                for (const at::Tensor& parameter : net->parameters()) left += parameter.is_meta() ? 1 : 0;
                meta_left.push_back(left);
              }).ok());
  EXPECT_EQ(seen.size(), 6u);                                  // Each once.
  EXPECT_EQ(meta_left, (std::vector<int>{5, 4, 3, 2, 1, 0}));  // In construction order, one at a time.
}

// What a later scope does to the model (the Trainer casts it for a "-true" precision in one) is replayed after the
// construction that made what it reads.
TEST(MetaDeviceScopeTest, ALaterScopesConversionFollowsTheConstruction) {
  torch::manual_seed(3);
  torch::nn::Linear normal(5, 4);
  torch::manual_seed(3);
  torch::nn::Linear net = [] {
    MetaDeviceScope meta;
    return torch::nn::Linear(5, 4);
  }();
  {
    MetaDeviceScope meta;
    at::NoGradGuard no_grad;
    for (at::Tensor& parameter : net->parameters()) parameter.set_data(parameter.to(at::kDouble));
  }
  const absl::Status status = MaterializeMetaTensors(*net);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(at::equal(net->weight, normal->weight.to(at::kDouble)));
  EXPECT_TRUE(at::equal(net->bias, normal->bias.to(at::kDouble)));
}

TEST(MetaDeviceScopeTest, AMetaTensorNoScopeRecordedIsRefusedByName) {
  torch::nn::Sequential net(torch::nn::Linear(2, 2));
  // (set_data refuses another backend's data; the tensor itself becomes a meta one.)
  net[0]->as<torch::nn::Linear>()->weight.unsafeGetTensorImpl()->shallow_copy_from(
      at::empty({2, 2}, at::device(at::kMeta)).getIntrusivePtr());
  const absl::Status status = MaterializeMetaTensors(*net);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("'0.weight'"), std::string::npos) << status;
  EXPECT_NE(status.message().find("LinearImpl"), std::string::npos) << status;
  EXPECT_NE(status.message().find("MetaDeviceScope"), std::string::npos) << status;
}

}  // namespace
}  // namespace kiln
