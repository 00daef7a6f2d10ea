// The precision plugins on their own, on CPU tensors: which plugin each precision gets, what TruePrecision casts,
// what autocast does inside MixedPrecision's context (and that it is left cleanly), and 16-mixed's loss scaling.
#include "trainer/plugins/precision/precision_plugin.h"

#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/autocast_mode.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/compat/autocast.h"
#include "hal/compat/version.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "torch/utils.h"
#include "trainer/plugins/precision/mixed_precision.h"
#include "trainer/plugins/precision/true_precision.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

const c10::Device kCpu(c10::DeviceType::CPU);

struct PluginCase {
  Precision precision;
  c10::Device device;
  std::string kind;      // "base", "true" or "mixed"; "" when creation must fail.
  at::ScalarType dtype;  // TruePrecision's type, or MixedPrecision's autocast type.
  bool scaler;           // MixedPrecision only.
  std::string error;     // Part of the message when creation fails.
};

TEST(MakePrecisionPluginTest, ChoosesThePluginForEachPrecisionAndDevice) {
  const c10::Device cuda(c10::DeviceType::CUDA, 0);  // Only named: creating the plugin touches no device.
  const c10::Device private_use(c10::DeviceType::PrivateUse1, 0);
  std::vector<PluginCase> cases = {
      {Precision::k32True, kCpu, "base", at::kFloat, false, ""},
      {Precision::k64True, kCpu, "true", at::kDouble, false, ""},
      {Precision::kBf16True, kCpu, "true", at::kBFloat16, false, ""},
      {Precision::k16True, kCpu, "true", at::kHalf, false, ""},
      {Precision::kBf16Mixed, kCpu, "mixed", at::kBFloat16, false, ""},
      {Precision::kBf16Mixed, cuda, "mixed", at::kBFloat16, false, ""},
      {Precision::k16Mixed, cuda, "mixed", at::kHalf, true, ""},
  };
  // What the LibTorch version has autocast for decides the rest (hal/compat/autocast_test checks that per version).
  const std::string built = compat::BuiltLibTorchVersion();
  const std::string lacks = absl::StrCat("needs LibTorch's autocast, which LibTorch ", built, " has for ",
                                         compat::AutocastDeviceTypes(), " devices but not for ");
  if (compat::HasAutocastType(c10::DeviceType::CPU, at::kHalf)) {
    cases.push_back({Precision::k16Mixed, kCpu, "mixed", at::kHalf, true, ""});
  } else {
    cases.push_back({Precision::k16Mixed, kCpu, "", at::kFloat, false,
                     "precision '16-mixed' needs float16 autocast on cpu devices, which LibTorch " + built +
                         " does not have (its CPU autocast runs bfloat16 only); use bf16-mixed"});
  }
  // The hpu accelerator and out-of-tree devices declare bf16-mixed; LibTorch 1.13 has no autocast for them.
  for (const c10::Device& device : {private_use, c10::Device(c10::DeviceType::HPU, 0)}) {
    if (compat::HasAutocast(device.type())) {
      cases.push_back({Precision::kBf16Mixed, device, "mixed", at::kBFloat16, false, ""});
    } else {
      cases.push_back({Precision::kBf16Mixed, device, "", at::kFloat, false,
                       absl::StrCat("precision 'bf16-mixed' ", lacks, c10::DeviceTypeName(device.type(), true),
                                    " devices")});
    }
  }
  for (const PluginCase& c : cases) {
    SCOPED_TRACE(absl::StrCat(PrecisionName(c.precision), " on ", c.device.str()));
    absl::StatusOr<std::shared_ptr<PrecisionPlugin>> plugin = MakePrecisionPlugin(c.precision, c.device);
    if (c.kind.empty()) {
      ASSERT_FALSE(plugin.ok());
      EXPECT_EQ(plugin.status().code(), absl::StatusCode::kUnimplemented);
      EXPECT_THAT(plugin.status().message(), HasSubstr(c.error));
      continue;
    }
    ASSERT_TRUE(plugin.ok()) << plugin.status();
    EXPECT_EQ((*plugin)->precision(), c.precision);
    auto* true_precision = dynamic_cast<TruePrecision*>(plugin->get());
    auto* mixed = dynamic_cast<MixedPrecision*>(plugin->get());
    EXPECT_EQ(true_precision != nullptr, c.kind == "true");
    EXPECT_EQ(mixed != nullptr, c.kind == "mixed");
    if (true_precision != nullptr) {
      EXPECT_EQ(true_precision->dtype(), c.dtype);
    }
    if (mixed != nullptr) {
      EXPECT_EQ(mixed->autocast_dtype(), c.dtype);
      EXPECT_EQ(mixed->device_type(), c.device.type());
      EXPECT_EQ(mixed->scaler() != nullptr, c.scaler);
      EXPECT_TRUE(mixed->CheckDevice(c.device).ok());
    }
  }
}

// A layer, a floating buffer and an integer buffer.
class Net : public torch::nn::Module {
 public:
  Net() {
    linear = register_module("linear", torch::nn::Linear(4, 3));
    running = register_buffer("running", at::ones({3}));
    count = register_buffer("count", at::zeros({1}, at::kLong));
  }
  torch::nn::Linear linear{nullptr};
  at::Tensor running;
  at::Tensor count;
};

TEST(TruePrecisionTest, CastsFloatingParametersBuffersAndBatchTensorsOnly) {
  for (const Precision precision : {Precision::k64True, Precision::kBf16True, Precision::k16True}) {
    TruePrecision plugin(precision);
    SCOPED_TRACE(PrecisionName(precision));
    Net net;
    const at::TensorImpl* weight_impl = net.linear->weight.unsafeGetTensorImpl();
    const at::Tensor original = net.linear->weight.detach().clone();
    net.linear->weight.mutable_grad() = at::ones_like(net.linear->weight);
    ASSERT_TRUE(plugin.ConvertModule(net).ok());
    for (const at::Tensor& parameter : net.parameters()) {
      EXPECT_EQ(parameter.scalar_type(), plugin.dtype());
      EXPECT_TRUE(parameter.requires_grad());
    }
    EXPECT_EQ(net.linear->weight.grad().scalar_type(), plugin.dtype());
    // The same tensor, converted in place: an optimizer built before or after holds it.
    EXPECT_EQ(net.linear->weight.unsafeGetTensorImpl(), weight_impl);
    // The values are the originals rounded to the new type.
    EXPECT_TRUE(net.linear->weight.detach().equal(original.to(plugin.dtype())));
    EXPECT_EQ(net.named_buffers()["running"].scalar_type(), plugin.dtype());
    EXPECT_EQ(net.named_buffers()["count"].scalar_type(), at::kLong);

    const Batch classes = plugin.ConvertInput({at::randn({2, 4}), at::tensor({0, 2}, at::kLong)});
    EXPECT_EQ(classes.input.scalar_type(), plugin.dtype());
    EXPECT_EQ(classes.target.scalar_type(), at::kLong);
    const Batch regression = plugin.ConvertInput({at::randn({2, 4}), at::randn({2})});
    EXPECT_EQ(regression.target.scalar_type(), plugin.dtype());
    const Batch unlabelled = plugin.ConvertInput({at::randn({2, 4}), at::Tensor()});
    EXPECT_FALSE(unlabelled.target.defined());
  }
}

TEST(TruePrecisionTest, TheDefaultDtypeIsThePrecisionsInsideTheForwardContextOnly) {
  TruePrecision plugin(Precision::k64True);
  ASSERT_EQ(at::zeros({1}).scalar_type(), at::kFloat);
  {
    PrecisionPlugin::ForwardContext outer(plugin);
    EXPECT_EQ(at::zeros({1}).scalar_type(), at::kDouble);
    {
      PrecisionPlugin::ForwardContext inner(plugin);
      EXPECT_EQ(at::zeros({1}).scalar_type(), at::kDouble);
    }
    EXPECT_EQ(at::zeros({1}).scalar_type(), at::kDouble);
  }
  EXPECT_EQ(at::zeros({1}).scalar_type(), at::kFloat);
  // Left on an exception too.
  EXPECT_THROW(
      {
        PrecisionPlugin::ForwardContext context(plugin);
        throw std::runtime_error("step failed");
      },
      std::runtime_error);
  EXPECT_EQ(at::zeros({1}).scalar_type(), at::kFloat);
}

std::unique_ptr<MixedPrecision> Mixed(MixedPrecisionOptions options) {
  absl::StatusOr<std::unique_ptr<MixedPrecision>> plugin = MixedPrecision::Create(options);
  EXPECT_TRUE(plugin.ok()) << plugin.status();
  return std::move(plugin).value();
}

TEST(MixedPrecisionTest, LinearLayersComputeInBfloat16WhileParametersStayFloat32) {
  torch::manual_seed(11);
  std::unique_ptr<MixedPrecision> plugin = Mixed({.precision = Precision::kBf16Mixed});
  torch::nn::Linear linear(16, 8);
  const at::Tensor input = at::randn({5, 16});
  const at::Tensor full = linear->forward(input);
  // What autocast must compute: the same linear layer on the inputs and parameters rounded to bfloat16.
  const at::Tensor bf16 =
      at::linear(input.to(at::kBFloat16), linear->weight.to(at::kBFloat16), linear->bias.to(at::kBFloat16));
  at::Tensor autocast;
  {
    PrecisionPlugin::ForwardContext context(*plugin);
    EXPECT_TRUE(at::autocast::is_cpu_enabled());
    autocast = linear->forward(input);
    // The loss is computed in float32 (autocast's float32 list), from the bfloat16 logits.
    EXPECT_EQ(torch::nn::functional::cross_entropy(autocast, at::zeros({5}, at::kLong)).scalar_type(), at::kFloat);
  }
  EXPECT_EQ(autocast.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(autocast.equal(bf16));
  // And it is not float32 arithmetic that happens to come out in bfloat16: that would round the float32 result,
  // which differs from the bfloat16 computation (inputs rounded before the products) in some element.
  EXPECT_FALSE(full.to(at::kBFloat16).equal(bf16));
  for (const at::Tensor& parameter : linear->parameters()) EXPECT_EQ(parameter.scalar_type(), at::kFloat);
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_EQ(linear->forward(input).scalar_type(), at::kFloat);
}

TEST(MixedPrecisionTest, LeavingClearsAutocastsCacheOfCastWeights) {
  // Inside an autocast region, LibTorch casts a float32 leaf weight to bfloat16 once and caches the copy (for ops
  // given the weight itself, such as mm; torch::nn::Linear passes a transposed view, which is not cached). Were the
  // cache kept after the region, the step after an optimizer update would compute with the old weights.
  torch::manual_seed(12);
  std::unique_ptr<MixedPrecision> plugin = Mixed({.precision = Precision::kBf16Mixed});
  at::Tensor weight = at::randn({16, 8}).requires_grad_(true);
  const at::Tensor input = at::randn({5, 16});
  {
    PrecisionPlugin::ForwardContext context(*plugin);
    const at::Tensor before = at::mm(input, weight);
    {
      torch::NoGradGuard no_grad;
      weight.add_(1.0);
    }
    // Within the region the cached copy is used: the in-place update is not seen (this is why leaving must clear).
    ASSERT_TRUE(at::mm(input, weight).equal(before));
  }
  const at::Tensor expected = at::mm(input.to(at::kBFloat16), weight.to(at::kBFloat16));
  PrecisionPlugin::ForwardContext context(*plugin);
  EXPECT_TRUE(at::mm(input, weight).equal(expected));
}

TEST(MixedPrecisionTest, NestsAndRestoresTheCallersAutocastState) {
  std::unique_ptr<MixedPrecision> plugin = Mixed({.precision = Precision::kBf16Mixed});
  ASSERT_FALSE(at::autocast::is_cpu_enabled());
  {
    PrecisionPlugin::ForwardContext outer(*plugin);
    { PrecisionPlugin::ForwardContext inner(*plugin); }
    EXPECT_TRUE(at::autocast::is_cpu_enabled());  // The inner context restored the outer one's state.
  }
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_THROW(
      {
        PrecisionPlugin::ForwardContext context(*plugin);
        throw std::runtime_error("step failed");
      },
      std::runtime_error);
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  // Nesting is counted back to zero: a fresh region starts from an empty cache (checked above), and the counter
  // LibTorch keeps is where it started.
  EXPECT_EQ(at::autocast::increment_nesting(), 1);
  EXPECT_EQ(at::autocast::decrement_nesting(), 0);
}

TEST(MixedPrecisionTest, CreateRejectsWhatIsNotMixedPrecision) {
  EXPECT_THAT(MixedPrecision::Create({.precision = Precision::k64True}).status().message(),
              HasSubstr("MixedPrecision runs bf16-mixed or 16-mixed, not '64-true'"));
  EXPECT_THAT(
      MixedPrecision::Create({.precision = Precision::kBf16Mixed, .autocast_dtype = at::kDouble}).status().message(),
      HasSubstr("autocast type Double for bf16-mixed is not valid"));
  EXPECT_THAT(
      MixedPrecision::Create(
          {.precision = Precision::k16Mixed, .device_type = c10::DeviceType::CUDA, .scaler = {.growth_interval = 0}})
          .status()
          .message(),
      HasSubstr("growth_interval=0 is not valid"));
  std::unique_ptr<MixedPrecision> cuda =
      Mixed({.precision = Precision::k16Mixed, .device_type = c10::DeviceType::CUDA});
  EXPECT_THAT(cuda->CheckDevice(kCpu).message(), HasSubstr("autocasts for cuda devices but the model runs on cpu"));
}

// 16-mixed's loss scaling, run over bfloat16 autocast. This is a stand-in: 16-mixed autocasts to float16, which
// LibTorch 1.13 cannot do on a CPU, so the float16 forward pass itself is not exercised here; the scaler's part
// (scaled loss, unscale, skipped step, scale update) does not depend on the autocast type.
TEST(MixedPrecisionTest, SixteenMixedScalesTheLossAndSkipsStepsWithInfGradients) {
  const auto make = [] {
    torch::manual_seed(13);
    return torch::nn::Linear(16, 4);
  };
  torch::manual_seed(14);
  const at::Tensor input = at::randn({8, 16});
  const at::Tensor target = at::randint(0, 4, {8}, at::kLong);

  // The reference: bf16-mixed, no scaler.
  std::unique_ptr<MixedPrecision> bf16 = Mixed({.precision = Precision::kBf16Mixed});
  torch::nn::Linear reference = make();
  at::Tensor reference_loss;
  {
    PrecisionPlugin::ForwardContext context(*bf16);
    reference_loss = torch::nn::functional::cross_entropy(reference->forward(input), target);
  }
  bf16->PreBackward(reference_loss).backward();

  std::unique_ptr<MixedPrecision> plugin = Mixed({.precision = Precision::k16Mixed,
                                                  .autocast_dtype = at::kBFloat16,
                                                  .scaler = {.init_scale = 1024, .growth_interval = 2}});
  ASSERT_NE(plugin->scaler(), nullptr);
  torch::nn::Linear linear = make();
  torch::optim::SGD optimizer(linear->parameters(), torch::optim::SGDOptions(0.1));
  at::Tensor loss;
  {
    PrecisionPlugin::ForwardContext context(*plugin);
    loss = torch::nn::functional::cross_entropy(linear->forward(input), target);
  }
  const at::Tensor scaled = plugin->PreBackward(loss);
  EXPECT_TRUE(scaled.equal(loss * 1024));
  scaled.backward();
  // Scaling by a power of two is exact (see grad_scaler_test.cc), also through bfloat16 matrix products, whose
  // exponent range is float32's: the gradients are exactly 1024 times the reference's, and unscaling restores them.
  EXPECT_TRUE(linear->weight.grad().equal(reference->weight.grad() * 1024));
  plugin->UnscaleGradients(optimizer);
  EXPECT_TRUE(linear->weight.grad().equal(reference->weight.grad()));
  EXPECT_EQ(linear->weight.grad().scalar_type(), at::kFloat);
  bool stepped = false;
  EXPECT_TRUE(plugin->OptimizerStep(optimizer, [&] {
    stepped = true;
    optimizer.step();
  }));
  EXPECT_TRUE(stepped);
  plugin->Update();
  EXPECT_EQ(plugin->state_dict().at("_growth_tracker"), 1);

  // An inf gradient: the step is skipped and the scale backs off.
  optimizer.zero_grad();
  {
    PrecisionPlugin::ForwardContext context(*plugin);
    loss = torch::nn::functional::cross_entropy(linear->forward(input), target);
  }
  plugin->PreBackward(loss).backward();
  linear->bias.mutable_grad()[0] = std::numeric_limits<float>::infinity();
  plugin->UnscaleGradients(optimizer);
  stepped = false;
  EXPECT_FALSE(plugin->OptimizerStep(optimizer, [&] { stepped = true; }));
  EXPECT_FALSE(stepped);
  plugin->Update();
  EXPECT_EQ(plugin->state_dict().at("scale"), 512);
  EXPECT_EQ(plugin->state_dict().at("_growth_tracker"), 0);
}

TEST(MixedPrecisionTest, StateIsTheScalersAndBf16MixedHasNone) {
  EXPECT_TRUE(Mixed({.precision = Precision::kBf16Mixed})->state_dict().empty());
  std::unique_ptr<MixedPrecision> cuda =
      Mixed({.precision = Precision::k16Mixed, .device_type = c10::DeviceType::CUDA, .scaler = {.init_scale = 8}});
  EXPECT_EQ(cuda->state_dict().at("scale"), 8);
  PrecisionState state = cuda->state_dict();
  state["scale"] = 2;
  EXPECT_TRUE(cuda->load_state_dict(state).ok());
  EXPECT_EQ(cuda->state_dict().at("scale"), 2);
  state["_growth_tracker"] = -3;
  EXPECT_THAT(cuda->CheckStateDict(state).message(), HasSubstr("_growth_tracker -3 is not valid"));
  // A plugin without a scaler ignores a scaler's state, as Lightning does when the precision changes on resume.
  EXPECT_TRUE(Mixed({.precision = Precision::kBf16Mixed})->load_state_dict(state).ok());
}

TEST(PrecisionFlagTest, APluginInstanceGivesThePrecisionUnlessTheFlagDisagrees) {
  std::shared_ptr<PrecisionPlugin> sixteen =
      Mixed({.precision = Precision::k16Mixed, .device_type = c10::DeviceType::CUDA});
  struct Case {
    std::string flag;
    const PrecisionPlugin* given;
    std::string expected;  // The flag for the connector, or part of the error.
    bool ok;
  };
  const std::vector<Case> cases = {
      {"32-true", nullptr, "32-true", true},
      {"bf16", nullptr, "bf16", true},  // Spellings are the connector's business.
      {"32-true", sixteen.get(), "16-mixed", true},
      {"16-mixed", sixteen.get(), "16-mixed", true},
      {"16", sixteen.get(), "16-mixed", true},
      {"bf16-mixed", sixteen.get(), "Received both `precision='bf16-mixed'` and a precision plugin for '16-mixed'",
       false},
      {"fp8", sixteen.get(), "Received both `precision='fp8'`", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flag);
    absl::StatusOr<std::string> flag = PrecisionFlag(c.flag, c.given);
    if (c.ok) {
      ASSERT_TRUE(flag.ok()) << flag.status();
      EXPECT_EQ(*flag, c.expected);
    } else {
      EXPECT_EQ(flag.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(flag.status().message(), HasSubstr(c.expected));
    }
  }
}

TEST(SelectPrecisionPluginTest, AGivenPluginMustRunThePlannedPrecisionOnThePlannedDevice) {
  std::shared_ptr<PrecisionPlugin> on_cpu = Mixed({.precision = Precision::k16Mixed, .autocast_dtype = at::kBFloat16});
  absl::StatusOr<std::shared_ptr<PrecisionPlugin>> selected = SelectPrecisionPlugin(Precision::k16Mixed, kCpu, on_cpu);
  ASSERT_TRUE(selected.ok()) << selected.status();
  EXPECT_EQ(selected->get(), on_cpu.get());
  // The accelerator substituted bf16-mixed for 16-mixed (as the cpu accelerator does).
  EXPECT_THAT(SelectPrecisionPlugin(Precision::kBf16Mixed, kCpu, on_cpu).status().message(),
              HasSubstr("the precision plugin runs '16-mixed' but the accelerator runs that as 'bf16-mixed'"));
  EXPECT_EQ(SelectPrecisionPlugin(Precision::k16Mixed, c10::Device(c10::DeviceType::CUDA, 0), on_cpu).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Without an instance: the plan's precision.
  selected = SelectPrecisionPlugin(Precision::k64True, kCpu, nullptr);
  ASSERT_TRUE(selected.ok());
  EXPECT_EQ((*selected)->precision(), Precision::k64True);
}

}  // namespace
}  // namespace kiln
