#include "trainer/checkpoint/lightning/optimizer_state_dict.h"

#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "caffe2/serialize/inline_container.h"
#include "caffe2/serialize/istream_adapter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adagrad.h"
#include "torch/optim/adam.h"
#include "torch/optim/adamw.h"
#include "torch/optim/lbfgs.h"
#include "torch/optim/rmsprop.h"
#include "torch/optim/sgd.h"
#include "trainer/checkpoint/format/torch_file.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using Maker = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

struct Case {
  std::string name;
  Maker make;
};

std::vector<Case> Cases() {
  using namespace torch::optim;
  return {
      {"Adam", [](auto p) { return std::make_unique<Adam>(p, AdamOptions(0.01).weight_decay(0.1)); }},
      {"AdamAmsgrad", [](auto p) { return std::make_unique<Adam>(p, AdamOptions(0.01).amsgrad(true)); }},
      {"AdamW", [](auto p) { return std::make_unique<AdamW>(p, AdamWOptions(0.01).amsgrad(true)); }},
      {"SGD", [](auto p) { return std::make_unique<SGD>(p, SGDOptions(0.1).momentum(0.9).nesterov(true)); }},
      {"RMSprop",
       [](auto p) { return std::make_unique<RMSprop>(p, RMSpropOptions(0.01).momentum(0.5).centered(true)); }},
      {"Adagrad", [](auto p) { return std::make_unique<Adagrad>(p, AdagradOptions(0.1).lr_decay(0.01)); }},
      {"LBFGS", [](auto p) { return std::make_unique<LBFGS>(p, LBFGSOptions(0.1).history_size(3)); }},
  };
}

// A linear model and its optimizer, stepped `steps` times on a fixed batch.
struct Trained {
  explicit Trained(const Maker& make, int steps) {
    torch::manual_seed(1);
    linear = torch::nn::Linear(3, 2);
    optimizer = make(linear->parameters());
    for (int i = 0; i < steps; ++i) Step();
  }
  void Step() {
    const at::Tensor input = at::linspace(-1, 1, 12).reshape({4, 3});
    auto closure = [&] {
      optimizer->zero_grad();
      at::Tensor loss = linear(input).pow(2).sum();
      loss.backward();
      return loss;
    };
    optimizer->step(closure);
  }
  torch::nn::Linear linear{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

// What a checkpoint holds: the state dict written to a torch.save file and read back.
c10::IValue ThroughAFile(const c10::IValue& value) {
  absl::StatusOr<std::string> bytes = SerializeTorchFile(value);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  std::istringstream stream(*bytes);
  caffe2::serialize::PyTorchStreamReader reader(std::make_unique<caffe2::serialize::IStreamAdapter>(&stream));
  absl::StatusOr<c10::IValue> read = ReadTorchFile(reader);
  EXPECT_TRUE(read.ok()) << read.status();
  return *read;
}

TEST(OptimizerStateDictTest, ALoadedStateStepsExactlyAsTheOriginal) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    Trained original(c.make, 3);
    absl::StatusOr<c10::IValue> saved = OptimizerStateDict(*original.optimizer);
    ASSERT_TRUE(saved.ok()) << saved.status();
    const c10::IValue state_dict = ThroughAFile(*saved);

    Trained resumed(c.make, 0);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < resumed.linear->parameters().size(); ++i) {
        resumed.linear->parameters()[i].copy_(original.linear->parameters()[i]);
      }
    }
    absl::StatusOr<std::function<void()>> load = PrepareOptimizerLoad(*resumed.optimizer, state_dict);
    ASSERT_TRUE(load.ok()) << load.status();
    (*load)();
    original.Step();
    resumed.Step();
    for (size_t i = 0; i < resumed.linear->parameters().size(); ++i) {
      EXPECT_TRUE(resumed.linear->parameters()[i].equal(original.linear->parameters()[i])) << "parameter " << i;
    }
  }
}

TEST(OptimizerStateDictTest, TheLayoutIsPyTorchs) {
  Trained adam([](auto p) { return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01)); }, 2);
  const c10::impl::GenericDict dict = ThroughAFile(OptimizerStateDict(*adam.optimizer).value()).toGenericDict();
  const auto groups = dict.at(std::string("param_groups")).toListRef();
  ASSERT_EQ(groups.size(), 1u);
  const c10::impl::GenericDict group = groups[0].toGenericDict();
  EXPECT_EQ(group.at(std::string("lr")).toDouble(), 0.01);
  EXPECT_EQ(group.at(std::string("betas")).toTupleRef().elements()[1].toDouble(), 0.999);
  EXPECT_FALSE(group.at(std::string("amsgrad")).toBool());
  EXPECT_FALSE(group.at(std::string("maximize")).toBool());
  EXPECT_EQ(group.at(std::string("params")).toListRef().size(), 2u);  // Weight and bias, numbered 0 and 1.
  const c10::impl::GenericDict state = dict.at(std::string("state")).toGenericDict();
  ASSERT_EQ(state.size(), 2u);
  const c10::impl::GenericDict weight = state.at(int64_t{0}).toGenericDict();
  EXPECT_EQ(weight.at(std::string("step")).toTensor().item<double>(), 2);
  EXPECT_EQ(weight.at(std::string("exp_avg")).toTensor().sizes(), adam.linear->weight.sizes());
  EXPECT_FALSE(weight.contains(std::string("max_exp_avg_sq"))) << "amsgrad is off";
}

TEST(OptimizerStateDictTest, WhatDoesNotFitIsRefusedAndChangesNothing) {
  const Maker adam = [](auto p) { return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01)); };
  Trained saved(adam, 1);
  const c10::impl::GenericDict good = ThroughAFile(OptimizerStateDict(*saved.optimizer).value()).toGenericDict();

  Trained target(adam, 0);
  const auto refuse = [&](const c10::IValue& state_dict, const std::string& expected) {
    absl::StatusOr<std::function<void()>> load = PrepareOptimizerLoad(*target.optimizer, state_dict);
    EXPECT_FALSE(load.ok());
    EXPECT_THAT(load.status().message(), HasSubstr(expected));
    EXPECT_TRUE(target.optimizer->state().empty()) << "the optimizer changed";
  };
  {
    c10::impl::GenericDict copy = ThroughAFile(good).toGenericDict();
    copy.at(std::string("param_groups")).toList().push_back(copy.at(std::string("param_groups")).toListRef()[0]);
    refuse(copy, "has 2 parameter group(s) but the optimizer has 1");
  }
  {
    c10::impl::GenericDict copy = ThroughAFile(good).toGenericDict();
    copy.at(std::string("param_groups")).toListRef()[0].toGenericDict().insert_or_assign(std::string("maximize"), true);
    refuse(copy, "'maximize' is True, which LibTorch's optimizers do not support");
  }
  {
    c10::impl::GenericDict copy = ThroughAFile(good).toGenericDict();
    copy.at(std::string("state"))
        .toGenericDict()
        .at(int64_t{0})
        .toGenericDict()
        .insert_or_assign(std::string("exp_avg"), at::zeros({7}));
    refuse(copy, "the state of parameter 0: 'exp_avg' has shape [7] but its parameter has [2, 3]");
  }
  {
    c10::impl::GenericDict copy = ThroughAFile(good).toGenericDict();
    copy.at(std::string("state"))
        .toGenericDict()
        .at(int64_t{1})
        .toGenericDict()
        .insert_or_assign(std::string("step"), at::scalar_tensor(1.5));
    refuse(copy, "'step' is 1.5, not a whole number of steps");
  }
  refuse(c10::IValue(int64_t{3}), "the optimizer state is a Int, not a dictionary");
}

}  // namespace
}  // namespace kiln
