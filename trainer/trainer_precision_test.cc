// Precision through the whole Trainer: what runs in which type for each precision the cpu accelerator declares,
// accuracy against 32-true, and 16-mixed's gradient scaling end to end (on a fake accelerator, see below),
// including its checkpointed state.
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/autocast_mode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/compat/autocast.h"
#include "hal/testing/fake_accelerator.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "torch/optim/sgd.h"
#include "torch/utils.h"
#include "trainer/classifier.h"
#include "trainer/plugins/precision/mixed_precision.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

using ::kiln::testing::FlatParameters;
using ::kiln::testing::Quiet;
using ::kiln::testing::RecordingClassifier;
using ::kiln::testing::SmallData;
using ::kiln::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records the type of everything a step touches.
class DtypeProbe : public LightningModule {
 public:
  DtypeProbe() {
    hidden_ = register_module("hidden", torch::nn::Linear(16, 32));
    output_ = register_module("output", torch::nn::Linear(32, 4));
  }
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    seen["input"].insert(batch.input.scalar_type());
    seen["default"].insert(at::zeros({1}).scalar_type());
    at::Tensor loss = torch::nn::functional::cross_entropy(Forward(batch.input, "linear"), batch.target);
    seen["loss"].insert(loss.scalar_type());
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const Batch& batch, int64_t batch_idx) override { Forward(batch.input, "val_linear"); }
  OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-3));
  }

  std::map<std::string, std::set<at::ScalarType>> seen;

 private:
  at::Tensor Forward(const at::Tensor& input, const std::string& key) {
    at::Tensor hidden = hidden_->forward(input);
    at::Tensor logits = output_->forward(hidden.relu());
    seen[key].insert(hidden.scalar_type());
    seen[key].insert(logits.scalar_type());
    return logits;
  }
  torch::nn::Linear hidden_{nullptr};
  torch::nn::Linear output_{nullptr};
};

// Records the type of the parameters and gradients the optimizer is about to use.
class GradientDtypes : public Callback {
 public:
  std::string state_key() const override { return "GradientDtypes"; }
  void on_before_optimizer_step(Trainer& trainer, LightningModule& module,
                                torch::optim::Optimizer& optimizer) override {
    for (const at::Tensor& parameter : module.parameters()) {
      parameters.insert(parameter.scalar_type());
      gradients.insert(parameter.grad().scalar_type());
    }
  }
  std::set<at::ScalarType> parameters;
  std::set<at::ScalarType> gradients;
};

struct DtypeCase {
  std::string precision;
  at::ScalarType parameters;  // Also the gradients and Adam's state.
  at::ScalarType input;       // Also LibTorch's default dtype inside the step.
  at::ScalarType linear;      // The outputs of the linear layers (training and validation).
  at::ScalarType loss;
};

TEST(TrainerPrecisionTest, EachPrecisionRunsInItsTypes) {
  const std::vector<DtypeCase> cases = {
      {"32-true", at::kFloat, at::kFloat, at::kFloat, at::kFloat},
      {"64-true", at::kDouble, at::kDouble, at::kDouble, at::kDouble},
      {"bf16-true", at::kBFloat16, at::kBFloat16, at::kBFloat16, at::kBFloat16},
      // Autocast: the matrix products in bfloat16, everything stored in float32, the loss computed in float32.
      {"bf16-mixed", at::kFloat, at::kFloat, at::kBFloat16, at::kFloat},
      {"bf16", at::kFloat, at::kFloat, at::kBFloat16, at::kFloat},  // Lightning's legacy spelling of bf16-mixed.
      {"64", at::kDouble, at::kDouble, at::kDouble, at::kDouble},
  };
  for (const DtypeCase& c : cases) {
    SCOPED_TRACE(c.precision);
    torch::manual_seed(0);
    DtypeProbe model;
    SyntheticClusters data(SmallData());
    auto gradients = std::make_shared<GradientDtypes>();
    Trainer trainer(Quiet({.precision = c.precision, .max_epochs = 1, .callbacks = {gradients}}));
    absl::Status status = trainer.fit(model, data);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_THAT(model.seen["input"], ElementsAre(c.input));
    EXPECT_THAT(model.seen["default"], ElementsAre(c.input));
    EXPECT_THAT(model.seen["linear"], ElementsAre(c.linear));
    EXPECT_THAT(model.seen["val_linear"], ElementsAre(c.linear));
    EXPECT_THAT(model.seen["loss"], ElementsAre(c.loss));
    EXPECT_THAT(gradients->parameters, ElementsAre(c.parameters));
    EXPECT_THAT(gradients->gradients, ElementsAre(c.parameters));
    for (const at::Tensor& parameter : model.parameters()) EXPECT_EQ(parameter.scalar_type(), c.parameters);
    for (const auto& [key, state] : trainer.optimizers()[0]->state()) {
      const auto& adam = static_cast<const torch::optim::AdamParamState&>(*state);
      EXPECT_EQ(adam.exp_avg().scalar_type(), c.parameters);
      EXPECT_EQ(adam.exp_avg_sq().scalar_type(), c.parameters);
    }
    // Nothing leaks out of the steps.
    EXPECT_EQ(at::zeros({1}).scalar_type(), at::kFloat);
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  }
}

// Trains the default model on the default task (trainer/fit's defaults) and returns the validation accuracy.
double ValAccuracy(const std::string& precision, uint64_t seed, int epochs) {
  torch::manual_seed(seed);
  MlpClassifier model(MlpOptions{});
  SyntheticClusters data(SyntheticOptions{});
  Trainer trainer(Quiet({.precision = precision, .max_epochs = epochs, .seed = seed, .enable_checkpointing = false}));
  absl::Status status = trainer.fit(model, data);
  EXPECT_TRUE(status.ok()) << status;
  return status.ok() ? trainer.callback_metrics().at("val_acc") : 0.0;
}

TEST(TrainerPrecisionTest, Bf16MixedAnd64TrueReachTheAccuracyOf32True) {
  // How close is close: both runs start from the same weights and see the same batches; they differ by rounding
  // (bfloat16 keeps 8 significant bits, a relative error of up to 2^-8 = 0.4% per rounded value; float64 rounds
  // far less than float32). Those small differences steer training onto a slightly different path, so the two final
  // models are at most as different as two runs of the same recipe. Each accuracy is measured on n = 1024
  // validation examples, so it carries a sampling error of sqrt(p (1 - p) / n) (0.008 at p = 0.93); two such
  // estimates differ with standard deviation sqrt(2) times that, and we allow three of those: 0.035 at p = 0.93.
  // A real fault (no autocast cleanup, wrong casts, scrambled gradients) costs far more: chance is 0.25. Five
  // epochs take every run well above 0.85 (the task's val_acc is within about 0.02 of its plateau by then), and
  // the comparison holds at any common schedule.
  const SyntheticOptions data;
  const double n = static_cast<double>(data.num_val);
  constexpr int kEpochs = 5;
  for (const uint64_t seed : {1, 2}) {
    const double reference = ValAccuracy("32-true", seed, kEpochs);
    const double tolerance = 3 * std::sqrt(2.0) * std::sqrt(reference * (1 - reference) / n);
    ASSERT_GT(reference, 0.85) << "the 32-true baseline itself did not train";
    for (const std::string precision : {"bf16-mixed", "64-true"}) {
      SCOPED_TRACE(precision + ", seed " + std::to_string(seed));
      EXPECT_NEAR(ValAccuracy(precision, seed, kEpochs), reference, tolerance);
    }
  }
}

TEST(TrainerPrecisionTest, Bf16TrueStillLearnsTheTask) {
  // bfloat16 parameters lose Adam's small updates to rounding, so no closeness to 32-true is promised; the model
  // must still learn: an untrained classifier over K classes is right 1/K of the time.
  const double chance = 1.0 / static_cast<double>(SyntheticOptions{}.num_classes);
  EXPECT_GT(ValAccuracy("bf16-true", 1, /*epochs=*/10), 3 * chance);
}

TEST(TrainerPrecisionTest, PrecisionErrorsStopBeforeTraining) {
  std::shared_ptr<PrecisionPlugin> sixteen_on_cpu =
      std::move(MixedPrecision::Create({.precision = Precision::k16Mixed, .autocast_dtype = at::kBFloat16})).value();
  kiln::testing::FakeAcceleratorOptions fake_options;
  fake_options.name = "fp16_chip";
  fake_options.precisions = {Precision::k32True, Precision::k16Mixed};
  auto fp16_chip = std::make_shared<kiln::testing::FakeAccelerator>(fake_options);
  struct Case {
    TrainerOptions options;
    std::string message;
  };
  std::vector<Case> cases = {
      {{.precision = "16-true"},
       "precision '16-true' is not supported by the cpu accelerator; it supports 32-true, 64-true, bf16-mixed, "
       "bf16-true. Pass one of these."},
      {{.precision = "bf16-mixed", .precision_plugin = sixteen_on_cpu},
       "Received both `precision='bf16-mixed'` and a precision plugin for '16-mixed'"},
      // The cpu accelerator runs 16-mixed as bf16-mixed; a 16-mixed plugin cannot run that.
      {{.precision_plugin = sixteen_on_cpu},
       "the precision plugin runs '16-mixed' but the accelerator runs that as "
       "'bf16-mixed'"},
  };
  // An accelerator that declares 16-mixed but computes on CPU devices: LibTorch 1.13 has no float16 CPU autocast
  // (LibTorch 2.x has it: hal/compat:autocast_test).
  if (!compat::HasAutocastType(c10::DeviceType::CPU, at::kHalf)) {
    cases.push_back({{.accelerator = fp16_chip, .devices = 1, .precision = "16-mixed"},
                     "precision '16-mixed' needs float16 autocast on cpu devices"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    RecordingClassifier model;
    SyntheticClusters data(SmallData());
    Trainer trainer(Quiet(c.options));
    absl::Status status = trainer.fit(model, data);
    EXPECT_THAT(status.message(), HasSubstr(c.message));
    EXPECT_EQ(model.training_steps, 0);
  }
}

// 16-mixed end to end. No accelerator on this machine can run it: the cpu accelerator does not declare it (and
// substitutes bf16-mixed), and LibTorch 1.13 has no float16 autocast on a CPU. So these tests use a fake
// accelerator that declares 16-mixed, with a MixedPrecision plugin for 16-mixed whose autocast runs bfloat16 (a
// stand-in: mixed_precision.h). Everything the scaler adds (scaled backward, unscale before clipping, skipped
// steps, the scale's schedule, checkpoints) runs for real; the float16 forward pass does not.
class SixteenMixedTest : public ::testing::Test {
 protected:
  std::shared_ptr<MixedPrecision> Plugin(GradScalerOptions scaler = {}) {
    absl::StatusOr<std::unique_ptr<MixedPrecision>> plugin =
        MixedPrecision::Create({.precision = Precision::k16Mixed, .autocast_dtype = at::kBFloat16, .scaler = scaler});
    EXPECT_TRUE(plugin.ok()) << plugin.status();
    return std::move(plugin).value();
  }
  TrainerOptions Options(std::shared_ptr<MixedPrecision> plugin, TrainerOptions options = {}) {
    kiln::testing::FakeAcceleratorOptions fake;
    fake.name = "fp16_chip";
    fake.precisions = {Precision::k32True, Precision::k16Mixed};
    options.accelerator = std::make_shared<kiln::testing::FakeAccelerator>(fake);
    options.devices = 1;
    options.precision_plugin = std::move(plugin);
    return Quiet(options);
  }
};

TEST_F(SixteenMixedTest, TheScaleGrowsOnScheduleThroughTheTrainer) {
  std::shared_ptr<MixedPrecision> plugin = Plugin({.growth_interval = 5});
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Options(plugin, {.max_steps = 12}));
  absl::Status status = trainer.fit(model, data);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(trainer.plan()->precision, Precision::k16Mixed);
  EXPECT_EQ(trainer.precision_plugin(), plugin.get());
  // Losses near 1 scaled by 2^16..2^18 give gradients far from float32's overflow, so all 12 steps are clean:
  // the scale doubled after steps 5 and 10, and two clean steps have been counted since.
  EXPECT_EQ(plugin->scaler()->get_scale(), 65536.0 * 4);
  EXPECT_EQ(plugin->scaler()->growth_tracker(), 2);
}

// Multiplies the loss by 1e38 at one step: finite in float32 (up to 3.4e38), but its gradient times the scale is
// not, so every gradient of that step is inf or NaN.
class OverflowAtStep : public RecordingClassifier {
 public:
  explicit OverflowAtStep(int64_t batch) : batch_(batch) {}
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = RecordingClassifier::training_step(batch, batch_idx);
    return batch_idx == batch_ ? loss * 1e38 : loss;
  }

 private:
  int64_t batch_;
};

// Records the parameters before and after each step.
class ParameterTrace : public Callback {
 public:
  std::string state_key() const override { return "ParameterTrace"; }
  void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) override {
    before.push_back(FlatParameters(module).clone());
  }
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override {
    after.push_back(FlatParameters(module).clone());
  }
  std::vector<at::Tensor> before;
  std::vector<at::Tensor> after;
};

TEST_F(SixteenMixedTest, AStepWithInfGradientsIsSkippedAndTheScaleBacksOff) {
  std::shared_ptr<MixedPrecision> plugin = Plugin();
  OverflowAtStep model(/*batch=*/3);
  SyntheticClusters data(SmallData());
  auto trace = std::make_shared<ParameterTrace>();
  Trainer trainer(Options(plugin, {.max_epochs = 1, .callbacks = {trace}}));
  absl::Status status = trainer.fit(model, data);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(trace->after.size(), 10u);
  for (size_t i = 0; i < trace->after.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(trace->after[i].equal(trace->before[i]), i == 3);
    EXPECT_TRUE(at::isfinite(trace->after[i]).all().item<bool>());
  }
  // Lightning counts the skipped step as a step.
  EXPECT_EQ(trainer.global_step(), 10);
  // Backed off once (step 3), then six clean steps (4..9) counted.
  EXPECT_EQ(plugin->scaler()->get_scale(), 32768.0);
  EXPECT_EQ(plugin->scaler()->growth_tracker(), 6);
}

// Records each step's gradient norm as the callbacks see it, and the size of the update the step made.
class ClippingProbe : public Callback {
 public:
  std::string state_key() const override { return "ClippingProbe"; }
  void on_before_optimizer_step(Trainer& trainer, LightningModule& module,
                                torch::optim::Optimizer& optimizer) override {
    before = FlatParameters(module).clone();
  }
  // After the step, the gradients are still the clipped ones it applied (zero_grad comes on the next window's
  // first batch).
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override {
    double squares = 0;
    for (const at::Tensor& parameter : module.parameters()) squares += parameter.grad().pow(2).sum().item<double>();
    norms.push_back(std::sqrt(squares));
    updates.push_back((FlatParameters(module) - before).norm().item<double>());
  }
  std::vector<double> norms;
  std::vector<double> updates;
  at::Tensor before;
};

// RecordingClassifier with plain SGD, so that an update is exactly -lr times the (clipped) gradient.
class SgdClassifier : public RecordingClassifier {
 public:
  OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(kLearningRate));
  }
  static constexpr double kLearningRate = 1.0;
};

TEST_F(SixteenMixedTest, ClippingActsOnUnscaledGradients) {
  // Gradient norms of this model are around 0.1 to 1 (cross-entropy near ln 4 at the start); clipping at 1e-2
  // clips every step (if one were not clipped, its norm below would show it). Clipped true gradients have norm 1e-2
  // and give an SGD update of norm lr x 1e-2. Had the scaled gradients been clipped instead, the update would be
  // 2^16 times smaller.
  const double clip = 1e-2;
  std::shared_ptr<MixedPrecision> plugin = Plugin();
  SgdClassifier model;
  SyntheticClusters data(SmallData());
  auto probe = std::make_shared<ClippingProbe>();
  Trainer trainer(Options(plugin, {.max_epochs = 1, .gradient_clip_val = clip, .callbacks = {probe}}));
  absl::Status status = trainer.fit(model, data);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(probe->updates.size(), 10u);
  // Tolerance: clip_grad_norm_ multiplies by clip / (norm + 1e-6), so the clipped norm is short of clip by a
  // relative 1e-6 / norm (at most 1e-5 for norms above 0.1), plus float32 rounding (~6e-8 relative per value).
  // The update is measured as new - old parameters, each rounded to float32: parameters of size ~0.5 carry an
  // absolute error of ~3e-8 per value, which over the whole vector moves a norm of 1e-2 by a relative ~3e-6.
  // 1e-4 relative is well above all of these.
  for (size_t i = 0; i < probe->updates.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_NEAR(probe->norms[i], clip, 1e-4 * clip);
    EXPECT_NEAR(probe->updates[i], SgdClassifier::kLearningRate * clip, 1e-4 * SgdClassifier::kLearningRate * clip);
  }
}

TEST_F(SixteenMixedTest, TheScalersStateIsCheckpointedAndRestoredExactly) {
  const GradScalerOptions scaler{.init_scale = 3000, .growth_factor = 1.5, .growth_interval = 5};
  SyntheticClusters data(SmallData());
  std::shared_ptr<MixedPrecision> first = Plugin(scaler);
  RecordingClassifier model;
  TrainerOptions options = Options(first, {.max_steps = 7});
  const std::string root = options.default_root_dir;
  Trainer trainer(options);
  ASSERT_TRUE(trainer.fit(model, data).ok());
  // Seven clean steps: grown once (3000 x 1.5 = 4500, exact in float32), two counted since.
  const GradScalerState saved = first->scaler()->state_dict();
  EXPECT_EQ(saved.at("scale"), 4500.0);
  EXPECT_EQ(saved.at("_growth_tracker"), 2);

  // Resumed with a fresh plugin and no further steps: exactly the saved state.
  std::shared_ptr<MixedPrecision> restored = Plugin(scaler);
  TrainerOptions resume = Options(restored, {.max_steps = 7});
  resume.default_root_dir = root;
  RecordingClassifier same;
  ASSERT_TRUE(Trainer(resume).fit(same, data, "last").ok());
  EXPECT_EQ(restored->scaler()->state_dict(), saved);

  // Resumed and trained three more steps: the schedule goes on from the saved count (2 + 3 = 5: grown again),
  // where a fresh scaler would stand at 3000 with a count of 3.
  std::shared_ptr<MixedPrecision> continued = Plugin(scaler);
  resume = Options(continued, {.max_steps = 10});
  resume.default_root_dir = root;
  RecordingClassifier more;
  ASSERT_TRUE(Trainer(resume).fit(more, data, "last").ok());
  EXPECT_EQ(continued->scaler()->get_scale(), 6750.0);  // 4500 x 1.5, exact in float32.
  EXPECT_EQ(continued->scaler()->growth_tracker(), 0);
}

TEST_F(SixteenMixedTest, ACheckpointWithoutScalerStateLeavesTheScalerFresh) {
  // A 32-true run's checkpoint (an empty precision record), resumed under 16-mixed, as Lightning does.
  SyntheticClusters data(SmallData());
  RecordingClassifier model;
  TrainerOptions plain = Options(nullptr, {.max_steps = 3});
  ASSERT_TRUE(Trainer(plain).fit(model, data).ok());
  std::shared_ptr<MixedPrecision> plugin = Plugin({.init_scale = 1024});
  TrainerOptions resume = Options(plugin, {.max_steps = 3});
  resume.default_root_dir = plain.default_root_dir;
  RecordingClassifier same;
  Trainer trainer(resume);
  ASSERT_TRUE(trainer.fit(same, data, "last").ok());
  EXPECT_FALSE(trainer.resumed_from().empty());
  EXPECT_EQ(plugin->scaler()->get_scale(), 1024.0);
  EXPECT_EQ(plugin->scaler()->growth_tracker(), 0);
}

}  // namespace
}  // namespace kiln
