// GradScaler on CPU tensors: scaling, unscaling, inf/NaN detection, skipped steps, the scale's schedule, clipping
// after unscale, misuse errors and the saved state.
//
// Exactness: the default scale and factors are powers of two. Multiplying or dividing a binary floating-point
// number by a power of two only changes its exponent, so it is exact unless it overflows or underflows; backward
// through a scaled loss therefore gives exactly `scale` times the unscaled gradients (every product and sum inside
// is scaled by the same power of two before rounding), and unscaling gives them back bit for bit. The tests below
// compare with `equal` where that argument holds.
#include "trainer/plugins/precision/grad_scaler.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/linear.h"
#include "torch/nn/utils/clip_grad.h"
#include "torch/optim/sgd.h"
#include "torch/utils.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

GradScaler MakeScaler(GradScalerOptions options = {}) {
  absl::StatusOr<GradScaler> scaler = GradScaler::Create(options);
  EXPECT_TRUE(scaler.ok()) << scaler.status();
  return std::move(scaler).value();
}

// A small regression problem with real autograd: a linear layer and a mean squared error.
struct Problem {
  Problem() : layer(torch::nn::Linear(3, 2)) {
    torch::manual_seed(5);
    layer = torch::nn::Linear(3, 2);
    input = at::randn({8, 3});
    target = at::randn({8, 2});
  }
  at::Tensor Loss() { return (layer->forward(input) - target).pow(2).mean(); }
  std::vector<at::Tensor> Grads() {
    std::vector<at::Tensor> grads;
    for (const at::Tensor& parameter : layer->parameters()) grads.push_back(parameter.grad().clone());
    return grads;
  }
  at::Tensor Flat() {
    std::vector<at::Tensor> flat;
    for (const at::Tensor& parameter : layer->parameters()) flat.push_back(parameter.detach().reshape({-1}).clone());
    return at::cat(flat);
  }

  torch::nn::Linear layer;
  at::Tensor input;
  at::Tensor target;
};

TEST(GradScalerTest, DefaultsArePyTorchs) {
  const GradScalerOptions options;
  EXPECT_EQ(options.init_scale, 65536.0);
  EXPECT_EQ(options.growth_factor, 2.0);
  EXPECT_EQ(options.backoff_factor, 0.5);
  EXPECT_EQ(options.growth_interval, 2000);
}

TEST(GradScalerTest, CreateRejectsBadOptions) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<GradScalerOptions, std::string>> cases = {
      {{.init_scale = 0}, "init_scale=0 is not valid"},
      {{.init_scale = -2}, "init_scale=-2 is not valid"},
      {{.init_scale = inf}, "init_scale=inf is not valid"},
      {{.init_scale = 1e39}, "init_scale=1e+39 is not valid"},  // Beyond float32.
      {{.growth_factor = 1.0}, "growth_factor=1 is not valid; the growth factor must be > 1.0"},
      {{.backoff_factor = 1.0}, "backoff_factor=1 is not valid; the backoff factor must be in (0, 1)"},
      {{.backoff_factor = 0.0}, "backoff_factor=0 is not valid"},
      {{.growth_interval = 0}, "growth_interval=0 is not valid"},
  };
  for (const auto& [options, message] : cases) {
    SCOPED_TRACE(message);
    absl::StatusOr<GradScaler> scaler = GradScaler::Create(options);
    ASSERT_FALSE(scaler.ok());
    EXPECT_EQ(scaler.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(scaler.status().message(), HasSubstr(message));
  }
}

// A strategy whose ranks hold different parts of the gradients (FSDP) sums the inf/NaN flags over them: another
// rank's inf skips this rank's step, with finite gradients here, and backs the scale off.
TEST(GradScalerTest, TheFoundInfReducerDecidesTheStep) {
  Problem scaled;
  const at::Tensor before = scaled.Flat().clone();
  torch::optim::SGD optimizer(scaled.layer->parameters(), torch::optim::SGDOptions(0.1));
  GradScaler scaler = MakeScaler();
  int calls = 0;
  scaler.set_found_inf_reducer([&](at::Tensor& found_inf) {
    ++calls;
    EXPECT_EQ(found_inf.item<float>(), 0.0f);  // Finite here.
    found_inf.fill_(1.0f);                      // An inf on another rank.
  });
  scaler.scale(scaled.Loss()).backward();
  EXPECT_FALSE(scaler.step(optimizer));
  scaler.update();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(scaled.Flat().equal(before));
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  // Cleared, the scaler decides on its own gradients again.
  scaler.set_found_inf_reducer(nullptr);
  optimizer.zero_grad();
  scaler.scale(scaled.Loss()).backward();
  EXPECT_TRUE(scaler.step(optimizer));
}

TEST(GradScalerTest, ScaleMultipliesTheLossAndKeepsItsShape) {
  GradScaler scaler = MakeScaler();
  EXPECT_EQ(scaler.get_scale(), 65536.0);  // Before the first scale(): init_scale.
  const at::Tensor loss = at::scalar_tensor(0.3, at::kFloat);
  const at::Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.dim(), 0);
  EXPECT_EQ(scaled.scalar_type(), at::kFloat);
  EXPECT_TRUE(scaled.equal(loss * 65536));  // Exact: a power of two.
  // A bfloat16 loss (as autocast may produce) is scaled in float32, where 65536 x loss is representable.
  EXPECT_EQ(scaler.scale(loss.to(at::kBFloat16)).scalar_type(), at::kFloat);
}

TEST(GradScalerTest, UnscaleRestoresTheTrueGradientsExactly) {
  Problem reference;
  reference.Loss().backward();
  Problem scaled;
  torch::optim::SGD optimizer(scaled.layer->parameters(), torch::optim::SGDOptions(0.1));
  GradScaler scaler = MakeScaler();
  scaler.scale(scaled.Loss()).backward();
  const std::vector<at::Tensor> expected = reference.Grads();
  std::vector<at::Tensor> before = scaled.Grads();
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_TRUE(before[i].equal(expected[i] * 65536)) << i;
  scaler.unscale_(optimizer);
  const std::vector<at::Tensor> after = scaled.Grads();
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_TRUE(after[i].equal(expected[i])) << i;
}

TEST(GradScalerTest, StepRunsWithFiniteGradientsAndUpdateCountsIt) {
  Problem reference;
  torch::optim::SGD reference_optimizer(reference.layer->parameters(), torch::optim::SGDOptions(0.1));
  reference.Loss().backward();
  reference_optimizer.step();

  Problem scaled;
  torch::optim::SGD optimizer(scaled.layer->parameters(), torch::optim::SGDOptions(0.1));
  GradScaler scaler = MakeScaler();
  scaler.scale(scaled.Loss()).backward();
  EXPECT_TRUE(scaler.step(optimizer));  // Unscales by itself: unscale_ was not called.
  scaler.update();
  EXPECT_TRUE(scaled.Flat().equal(reference.Flat()));
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScalerTest, InfOrNanGradientSkipsTheStepAndBacksOff) {
  for (const double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    Problem problem;
    torch::optim::SGD optimizer(problem.layer->parameters(), torch::optim::SGDOptions(0.1));
    GradScaler scaler = MakeScaler();
    scaler.scale(problem.Loss()).backward();
    // One element of one gradient goes bad, as an overflow in a scaled backward makes it.
    problem.layer->weight.mutable_grad()[1][2] = bad;
    const at::Tensor before = problem.Flat();
    bool ran_step = false;
    EXPECT_FALSE(scaler.step(optimizer, [&] { ran_step = true; }));
    EXPECT_FALSE(ran_step);
    EXPECT_TRUE(problem.Flat().equal(before));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 32768.0);  // 65536 x backoff 0.5.
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

// Runs one iteration: clean gradients, or one inf in the weight's gradient.
void Iterate(GradScaler& scaler, Problem& problem, torch::optim::Optimizer& optimizer, bool inf) {
  optimizer.zero_grad();
  scaler.scale(problem.Loss()).backward();
  if (inf) problem.layer->weight.mutable_grad()[0][0] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(scaler.step(optimizer), !inf);
  scaler.update();
}

TEST(GradScalerTest, ScaleGrowsAfterGrowthIntervalCleanStepsAndBacksOffOnInf) {
  Problem problem;
  torch::optim::SGD optimizer(problem.layer->parameters(), torch::optim::SGDOptions(0.01));
  GradScaler scaler =
      MakeScaler({.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.25, .growth_interval = 3});
  // Expected (scale, tracker) after each iteration, from PyTorch's rule: a clean step counts; the third clean step
  // in a row multiplies the scale by 2 and restarts the count; an inf multiplies it by 0.25 and restarts the count.
  struct Expected {
    bool inf;
    double scale;
    int64_t tracker;
  };
  const std::vector<Expected> schedule = {
      {false, 1024, 1}, {false, 1024, 2}, {false, 2048, 0},  // Grown after 3 clean steps.
      {false, 2048, 1}, {true, 512, 0},                      // Backed off; the count restarts.
      {false, 512, 1},  {false, 512, 2},  {false, 1024, 0},
  };
  for (size_t i = 0; i < schedule.size(); ++i) {
    SCOPED_TRACE(i);
    Iterate(scaler, problem, optimizer, schedule[i].inf);
    EXPECT_EQ(scaler.get_scale(), schedule[i].scale);
    EXPECT_EQ(scaler.growth_tracker(), schedule[i].tracker);
  }
}

TEST(GradScalerTest, ScaleNeverGrowsPastFloat32) {
  // 2^127 is the largest power of two in float32; 2^128 overflows to inf, so growth is refused, but the count
  // still restarts (as in the CUDA kernel).
  Problem problem;
  torch::optim::SGD optimizer(problem.layer->parameters(), torch::optim::SGDOptions(0.0));
  const double largest = std::ldexp(1.0, 127);
  GradScaler scaler = MakeScaler({.init_scale = largest, .growth_interval = 1});
  optimizer.zero_grad();
  // A tiny loss, so that the scaled backward stays finite.
  (scaler.scale(problem.Loss() * 1e-30)).backward();
  EXPECT_TRUE(scaler.step(optimizer));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), largest);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScalerTest, EachOptimizerIsSkippedOnItsOwnInfButUpdateSeesAll) {
  Problem problem;
  torch::optim::SGD weight_optimizer({problem.layer->weight}, torch::optim::SGDOptions(0.1));
  torch::optim::SGD bias_optimizer({problem.layer->bias}, torch::optim::SGDOptions(0.1));
  GradScaler scaler = MakeScaler();
  scaler.scale(problem.Loss()).backward();
  problem.layer->weight.mutable_grad()[0][0] = std::numeric_limits<float>::quiet_NaN();
  const at::Tensor bias_before = problem.layer->bias.detach().clone();
  EXPECT_FALSE(scaler.step(weight_optimizer));
  EXPECT_TRUE(scaler.step(bias_optimizer));
  EXPECT_FALSE(problem.layer->bias.detach().equal(bias_before));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

TEST(GradScalerTest, ClippingAfterUnscaleActsOnTrueGradients) {
  // The reference clips the true gradients at a third of their norm; the scaled run unscales, then clips the same
  // way. Clipping scaled gradients instead would leave them 65536 times too small after the step's unscale.
  Problem reference;
  torch::optim::SGD reference_optimizer(reference.layer->parameters(), torch::optim::SGDOptions(0.1));
  reference.Loss().backward();
  double squares = 0;
  for (const at::Tensor& grad : reference.Grads()) squares += grad.pow(2).sum().item<double>();
  const double max_norm = std::sqrt(squares) / 3;
  torch::nn::utils::clip_grad_norm_(reference.layer->parameters(), max_norm);
  reference_optimizer.step();

  Problem scaled;
  torch::optim::SGD optimizer(scaled.layer->parameters(), torch::optim::SGDOptions(0.1));
  GradScaler scaler = MakeScaler();
  scaler.scale(scaled.Loss()).backward();
  scaler.unscale_(optimizer);
  torch::nn::utils::clip_grad_norm_(scaled.layer->parameters(), max_norm);
  EXPECT_TRUE(scaler.step(optimizer));  // Does not unscale a second time.
  scaler.update();
  // Unscaling restored the gradients exactly (see the top of the file), so clipping and stepping are the same
  // operations on the same numbers.
  EXPECT_TRUE(scaled.Flat().equal(reference.Flat()));
}

TEST(GradScalerTest, MisuseThrowsPyTorchsErrors) {
  Problem problem;
  torch::optim::SGD optimizer(problem.layer->parameters(), torch::optim::SGDOptions(0.1));
  {
    GradScaler scaler = MakeScaler();
    problem.Loss().backward();
    EXPECT_THAT([&] { scaler.unscale_(optimizer); },
                ::testing::ThrowsMessage<c10::Error>(HasSubstr("did not use scaler.scale(loss or outputs)")));
  }
  GradScaler scaler = MakeScaler();
  EXPECT_THAT([&] { scaler.update(); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("No inf checks were recorded prior to update.")));
  optimizer.zero_grad();
  scaler.scale(problem.Loss()).backward();
  scaler.unscale_(optimizer);
  EXPECT_THAT([&] { scaler.unscale_(optimizer); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("unscale_() has already been called on this optimizer")));
  scaler.step(optimizer);
  EXPECT_THAT(
      [&] { scaler.step(optimizer); },
      ::testing::ThrowsMessage<c10::Error>(HasSubstr("step() has already been called since the last update()")));
  EXPECT_THAT([&] { scaler.unscale_(optimizer); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("unscale_() is being called after step()")));
  scaler.update();
  // float16 gradients: their parameters would have to be float16, which mixed precision never makes.
  at::Tensor half = at::zeros({2}, at::TensorOptions().dtype(at::kHalf).requires_grad(true));
  half.mutable_grad() = at::ones({2}, at::kHalf);
  torch::optim::SGD half_optimizer({half}, torch::optim::SGDOptions(0.1));
  EXPECT_THAT([&] { scaler.unscale_(half_optimizer); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("Attempting to unscale FP16 gradients.")));
}

TEST(GradScalerTest, TheScalerUsesLibTorchsAmpOpsWhereTheyHaveCpuKernels) {
  // The scaler calls LibTorch's two ops; the values they must give are worked out by hand below.
  at::Tensor scale = at::full({1}, 4.0, at::kFloat);
  at::Tensor tracker = at::zeros({1}, at::kInt);
  at::Tensor found_inf = at::zeros({1}, at::kFloat);
  std::vector<at::Tensor> tensors = {at::full({2}, 8.0)};
  at::_amp_foreach_non_finite_check_and_unscale_(tensors, found_inf, at::full({1}, 0.25));
  EXPECT_TRUE(tensors[0].equal(at::full({2}, 2.0)));
  EXPECT_EQ(found_inf.item<float>(), 0);
  // A clean step counts towards growth; two more (interval 3) double the scale.
  for (int step = 0; step < 3; ++step) at::_amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 3);
  EXPECT_EQ(scale.item<float>(), 8);
  EXPECT_EQ(tracker.item<int>(), 0);
  // A non-finite gradient is found, and backs the scale off.
  tensors = {at::tensor({1.0f, std::numeric_limits<float>::infinity()})};
  at::_amp_foreach_non_finite_check_and_unscale_(tensors, found_inf, at::full({1}, 0.25));
  EXPECT_EQ(found_inf.item<float>(), 1);
  at::_amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 3);
  EXPECT_EQ(scale.item<float>(), 4);
}

TEST(GradScalerTest, StateRoundTripsExactly) {
  Problem problem;
  torch::optim::SGD optimizer(problem.layer->parameters(), torch::optim::SGDOptions(0.01));
  GradScaler scaler =
      MakeScaler({.init_scale = 3.0, .growth_factor = 1.5, .backoff_factor = 0.3, .growth_interval = 4});
  for (bool inf : {false, false, false, false, true, false, false}) Iterate(scaler, problem, optimizer, inf);
  // 3 -> 4.5 (four clean steps) -> float32(4.5 x 0.3) (inf), then two clean steps.
  EXPECT_EQ(scaler.get_scale(), static_cast<double>(static_cast<float>(4.5 * 0.3)));
  EXPECT_EQ(scaler.growth_tracker(), 2);
  const GradScalerState state = scaler.state_dict();
  EXPECT_EQ(state.at("growth_interval"), 4);
  EXPECT_EQ(state.at("_growth_tracker"), 2);

  // Loaded into a scaler that has not created its tensors yet, and into one that has.
  GradScaler fresh = MakeScaler();
  ASSERT_TRUE(fresh.load_state_dict(state).ok());
  EXPECT_EQ(fresh.state_dict(), state);
  Problem other;
  torch::optim::SGD other_optimizer(other.layer->parameters(), torch::optim::SGDOptions(0.01));
  GradScaler used = MakeScaler();
  Iterate(used, other, other_optimizer, false);
  ASSERT_TRUE(used.load_state_dict(state).ok());
  EXPECT_EQ(used.state_dict(), state);
  // Both continue on the loaded schedule: two more clean steps reach growth_interval 4.
  for (GradScaler* loaded : {&fresh, &used}) {
    Iterate(*loaded, other, other_optimizer, false);
    Iterate(*loaded, other, other_optimizer, false);
    EXPECT_EQ(loaded->get_scale(), static_cast<double>(static_cast<float>(state.at("scale") * 1.5)));
    EXPECT_EQ(loaded->growth_tracker(), 0);
  }
}

TEST(GradScalerTest, BadStateIsRefusedAndChangesNothing) {
  const GradScalerState good = MakeScaler().state_dict();
  const auto with = [&](const std::string& key, double value) {
    GradScalerState state = good;
    state[key] = value;
    return state;
  };
  GradScalerState missing = good;
  missing.erase("_growth_tracker");
  const std::vector<std::pair<GradScalerState, std::string>> cases = {
      {missing, "has no '_growth_tracker'"},
      {with("scale", -1), "init_scale=-1 is not valid"},
      {with("scale", std::numeric_limits<double>::quiet_NaN()), "init_scale=nan is not valid"},
      {with("growth_factor", 0.5), "growth_factor=0.5 is not valid"},
      {with("growth_interval", 2.5), "growth_interval 2.5 is not a whole number"},
      {with("_growth_tracker", 2000), "_growth_tracker 2000 is not valid"},
      {with("_growth_tracker", -1), "_growth_tracker -1 is not valid"},
  };
  for (const auto& [state, message] : cases) {
    SCOPED_TRACE(message);
    GradScaler scaler = MakeScaler({.init_scale = 8});
    absl::Status status = scaler.load_state_dict(state);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr(message));
    EXPECT_EQ(scaler.get_scale(), 8.0);
  }
}

}  // namespace
}  // namespace kiln
