// Kiln's fused Adam, AdamW and SGD against torch::optim's, on the same parameters and gradients: equal to rounding
// under LibTorch 2.x (the bound is derived below), torch::optim's own classes under 1.13, a device-side skip that
// leaves everything as it was, and state that torch::optim reads back.
#include "trainer/optim/fused_optimizers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "ATen/ATen.h"
#include "gtest/gtest.h"
#include "hal/compat/optimizer_state.h"
#include "torch/optim/adam.h"
#include "torch/optim/adamw.h"
#include "torch/optim/sgd.h"
#include "torch/serialize.h"
#include "torch/version.h"

namespace kiln {
namespace {

// Three parameters of different shapes, equal in both copies.
std::vector<at::Tensor> Params() {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(7);
  std::vector<at::Tensor> params;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{64, 33}, {33}, {5, 7, 3}}) {
    params.push_back(at::randn(shape, generator).set_requires_grad(true));
  }
  return params;
}

std::vector<at::Tensor> Clone(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : params) out.push_back(p.detach().clone().set_requires_grad(true));
  return out;
}

// The same pseudo-random gradient for step `step` of parameter `i`, whichever copy asks.
void SetGrads(const std::vector<at::Tensor>& params, int64_t step) {
  for (size_t i = 0; i < params.size(); ++i) {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(1000 * step + i);
    params[i].mutable_grad() = at::randn(params[i].sizes(), generator);
  }
}

// Largest |a - b| over the lists.
double MaxDifference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

bool BitwiseEqual(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i], b[i])) return false;
  }
  return true;
}

// Each step of either implementation changes an element by at most lr (Adam's update is lr m/(sqrt(v)+eps) with
// |m|/sqrt(v) <= 1 for these bias-corrected moments, to rounding), and either rounds each of its few operators to
// float: so the update's relative difference is a few float epsilons, and over `steps` steps the parameters differ
// by at most steps * lr * 16 eps, plus one rounding of each parameter's magnitude (|p| < 8 here) per step.
double AdamBound(int64_t steps, double lr) {
  const double eps = std::numeric_limits<float>::epsilon();
  return steps * (lr * 16 * eps + 8 * eps);
}

template <typename Fused, typename Reference, typename Options>
void ExpectAdamMatches(const Options& options, const char* name) {
  const std::vector<at::Tensor> reference_params = Params();
  const std::vector<at::Tensor> fused_params = Clone(reference_params);
  Reference reference(reference_params, options);
  Fused fused(fused_params, options);
  constexpr int64_t kSteps = 30;
  for (int64_t step = 0; step < kSteps; ++step) {
    SetGrads(reference_params, step);
    SetGrads(fused_params, step);
    reference.step();
    fused.step();
  }
  ASSERT_TRUE(fused.fused()) << name << ": LibTorch 2.x has fused kernels for the CPU";
  const double difference = MaxDifference(reference_params, fused_params);
  std::printf("%s: largest parameter difference after %ld steps %.3g (bound %.3g)\n", name, kSteps, difference,
              AdamBound(kSteps, options.lr()));
  EXPECT_LE(difference, AdamBound(kSteps, options.lr())) << name;
  EXPECT_FALSE(BitwiseEqual(reference_params, fused_params))
      << name << ": the fused kernel rounds differently; equal bits mean it did not run";
  for (size_t i = 0; i < reference_params.size(); ++i) {
    const auto* r = static_cast<const typename Reference::ParamState*>(compat::StateOf(reference, reference_params[i]));
    const auto* f = static_cast<const typename Reference::ParamState*>(compat::StateOf(fused, fused_params[i]));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->step(), r->step());
    EXPECT_TRUE(at::allclose(f->exp_avg(), r->exp_avg(), 1e-5, 1e-6)) << name << " exp_avg of parameter " << i;
    EXPECT_TRUE(at::allclose(f->exp_avg_sq(), r->exp_avg_sq(), 1e-5, 1e-7)) << name << " exp_avg_sq " << i;
    EXPECT_EQ(f->max_exp_avg_sq().defined(), r->max_exp_avg_sq().defined());
  }
}

class ReferenceAdam : public torch::optim::Adam {
 public:
  using ParamState = torch::optim::AdamParamState;
  using torch::optim::Adam::Adam;
};
class ReferenceAdamW : public torch::optim::AdamW {
 public:
  using ParamState = torch::optim::AdamWParamState;
  using torch::optim::AdamW::AdamW;
};

TEST(FusedOptimizers, MakeOptimizerPicksTheFusedClassUnlessAskedNotTo) {
  for (const std::string name : {"adam", "adamw", "sgd"}) {
    const auto fused = MakeOptimizer(name, Params(), 1e-3, /*fused=*/true);
    const auto plain = MakeOptimizer(name, Params(), 1e-3, /*fused=*/false);
    const bool is_fused = dynamic_cast<DeviceSkipOptimizer*>(fused.get()) != nullptr;
    EXPECT_TRUE(is_fused) << name;
    EXPECT_EQ(dynamic_cast<DeviceSkipOptimizer*>(plain.get()), nullptr) << name << ": fused=false is torch::optim's";
  }
  EXPECT_NE(dynamic_cast<torch::optim::Adam*>(MakeOptimizer("adam", Params(), 1e-3, true).get()), nullptr);
  EXPECT_NE(dynamic_cast<torch::optim::AdamW*>(MakeOptimizer("adamw", Params(), 1e-3, true).get()), nullptr);
  EXPECT_NE(dynamic_cast<torch::optim::SGD*>(MakeOptimizer("sgd", Params(), 1e-3, true).get()), nullptr);
}

using Fused2 = ::testing::Test;

TEST_F(Fused2, AdamMatchesTorchOptimToRounding) {
  ExpectAdamMatches<FusedAdam, ReferenceAdam>(torch::optim::AdamOptions(1e-3), "Adam");
  ExpectAdamMatches<FusedAdam, ReferenceAdam>(torch::optim::AdamOptions(1e-2).weight_decay(0.01).amsgrad(true),
                                              "Adam, weight decay, amsgrad");
}

TEST_F(Fused2, AdamWMatchesTorchOptimToRounding) {
  ExpectAdamMatches<FusedAdamW, ReferenceAdamW>(torch::optim::AdamWOptions(1e-3), "AdamW");
  ExpectAdamMatches<FusedAdamW, ReferenceAdamW>(torch::optim::AdamWOptions(1e-2).weight_decay(0.1).amsgrad(true),
                                                "AdamW, amsgrad");
}

TEST_F(Fused2, SgdMatchesTorchOptimToRounding) {
  for (const torch::optim::SGDOptions& options :
       {torch::optim::SGDOptions(0.01), torch::optim::SGDOptions(0.01).momentum(0.9),
        torch::optim::SGDOptions(0.01).momentum(0.9).nesterov(true).weight_decay(1e-3),
        torch::optim::SGDOptions(0.01).momentum(0.9).dampening(0.5)}) {
    const std::vector<at::Tensor> reference_params = Params();
    const std::vector<at::Tensor> fused_params = Clone(reference_params);
    torch::optim::SGD reference(reference_params, options);
    FusedSGD fused(fused_params, options);
    for (int64_t step = 0; step < 30; ++step) {
      SetGrads(reference_params, step);
      SetGrads(fused_params, step);
      reference.step();
      fused.step();
    }
    ASSERT_TRUE(fused.fused());
    // SGD's update is lr times a sum of gradients (|g| < 6 here) weighted by at most 1/(1 - momentum) = 10: each
    // step differs by a few roundings of that, and of the parameter (|p| < 8).
    const double eps = std::numeric_limits<float>::epsilon();
    const double bound = 30 * (options.lr() * 60 * 4 * eps + 8 * eps);
    const double difference = MaxDifference(reference_params, fused_params);
    std::printf("SGD momentum %g nesterov %d dampening %g: largest difference %.3g (bound %.3g)\n", options.momentum(),
                options.nesterov(), options.dampening(), difference, bound);
    EXPECT_LE(difference, bound);
  }
}

TEST_F(Fused2, FoundInfSkipsTheWholeUpdateOnTheDevice) {
  const std::vector<at::Tensor> params = Params();
  FusedAdam adam(params, torch::optim::AdamOptions(1e-2));
  SetGrads(params, 0);
  adam.step();
  const std::vector<at::Tensor> before = Clone(params);
  const auto* state = static_cast<const torch::optim::AdamParamState*>(compat::StateOf(adam, params[0]));
  const at::Tensor exp_avg_before = state->exp_avg().clone();

  ASSERT_TRUE(adam.can_skip_on_device());
  adam.set_found_inf(at::ones({}, at::kFloat));
  SetGrads(params, 1);
  adam.step();
  EXPECT_TRUE(BitwiseEqual(params, before)) << "a flagged step must leave the parameters";
  EXPECT_TRUE(at::equal(state->exp_avg(), exp_avg_before)) << "and the moments";
  EXPECT_EQ(state->step(), 2) << "the host counts ahead until SyncStateToHost";
  adam.SyncStateToHost();
  EXPECT_EQ(state->step(), 1) << "the skipped step is not counted";

  // A zero flag applies the step exactly as no flag does.
  const std::vector<at::Tensor> twin = Clone(params);
  FusedAdam unflagged(twin, torch::optim::AdamOptions(1e-2));
  SetGrads(twin, 0);
  unflagged.step();
  for (size_t i = 0; i < params.size(); ++i) twin[i].detach().copy_(params[i].detach());
  adam.set_found_inf(at::zeros({}, at::kFloat));
  SetGrads(params, 2);
  SetGrads(twin, 2);
  adam.step();
  unflagged.step();
  EXPECT_TRUE(BitwiseEqual(params, twin)) << "a step after a skip counts as the second";

  FusedSGD sgd(Clone(params), torch::optim::SGDOptions(0.1).momentum(0.9));
  const std::vector<at::Tensor> sgd_params = sgd.param_groups()[0].params();
  const std::vector<at::Tensor> sgd_before = Clone(sgd_params);
  ASSERT_TRUE(sgd.can_skip_on_device());
  sgd.set_found_inf(at::ones({}, at::kFloat));
  SetGrads(sgd_params, 3);
  sgd.step();
  EXPECT_TRUE(BitwiseEqual(sgd_params, sgd_before));
  sgd.set_found_inf(at::zeros({}, at::kFloat));
  sgd.step();
  EXPECT_FALSE(BitwiseEqual(sgd_params, sgd_before));
  EXPECT_FALSE(
      FusedSGD(Clone(params), torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1)).can_skip_on_device());
}

TEST_F(Fused2, StateSavedByFusedLoadsIntoTorchOptimAndBack) {
  const std::vector<at::Tensor> params = Params();
  FusedAdam fused(params, torch::optim::AdamOptions(1e-3));
  for (int64_t step = 0; step < 5; ++step) {
    SetGrads(params, step);
    fused.step();
  }
  torch::serialize::OutputArchive archive;
  fused.save(archive);
  const std::string path = ::testing::TempDir() + "/fused_adam.pt";
  archive.save_to(path);

  // torch::optim continues from the fused state, and a fresh fused optimizer does too, from the same archive.
  const std::vector<at::Tensor> reference_params = Clone(params);
  const std::vector<at::Tensor> resumed_params = Clone(params);
  torch::optim::Adam reference(reference_params, torch::optim::AdamOptions(1e-3));
  FusedAdam resumed(resumed_params, torch::optim::AdamOptions(1e-3));
  for (torch::optim::Optimizer* optimizer :
       {static_cast<torch::optim::Optimizer*>(&reference), static_cast<torch::optim::Optimizer*>(&resumed)}) {
    torch::serialize::InputArchive input;
    input.load_from(path);
    compat::LoadOptimizer(*optimizer, input);
  }
  for (int64_t step = 5; step < 10; ++step) {
    SetGrads(reference_params, step);
    SetGrads(resumed_params, step);
    reference.step();
    resumed.step();
  }
  const double difference = MaxDifference(reference_params, resumed_params);
  EXPECT_LE(difference, AdamBound(5, 1e-3));
  const auto* r = static_cast<const torch::optim::AdamParamState*>(compat::StateOf(reference, reference_params[0]));
  const auto* f = static_cast<const torch::optim::AdamParamState*>(compat::StateOf(resumed, resumed_params[0]));
  EXPECT_EQ(r->step(), 10);
  EXPECT_EQ(f->step(), 10) << "the device counts restart from the loaded state";
  // Had the loaded counts been ignored (restarting at 1), the bias corrections would move the first steps by up to
  // lr: far outside the rounding bound.
}

}  // namespace
}  // namespace kiln
