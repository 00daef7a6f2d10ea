#include "hal/compat/optimizer_state.h"

#include <sstream>
#include <string>
#include <vector>

#include "ATen/ops/full.h"
#include "ATen/ops/randn.h"
#include "gtest/gtest.h"
#include "torch/optim/adam.h"
#include "torch/optim/sgd.h"
#include "torch/serialize/output-archive.h"

namespace kiln::compat {
namespace {

// Two parameters of different shapes, so that a state restored onto the wrong one shows.
std::vector<at::Tensor> Params() { return {at::randn({3, 2}).requires_grad_(), at::randn({4}).requires_grad_()}; }

torch::serialize::InputArchive Reopen(torch::serialize::OutputArchive& written) {
  std::ostringstream bytes;
  written.save_to(bytes);
  std::istringstream input(bytes.str());
  torch::serialize::InputArchive archive;
  archive.load_from(input);
  return archive;
}

// Each parameter's Adam state has its shape and its first moment filled with `fill[i]`.
bool StateFits(torch::optim::Adam& adam, const std::vector<at::Tensor>& params, const std::vector<float>& fill) {
  for (size_t i = 0; i < params.size(); ++i) {
    const auto* state = dynamic_cast<const torch::optim::AdamParamState*>(StateOf(adam, params[i]));
    if (state == nullptr) return false;
    if (!state->exp_avg().sizes().equals(params[i].sizes()) || !state->exp_avg().eq(fill[i]).all().item<bool>()) {
      return false;
    }
  }
  return true;
}

// What LibTorch 1.13's Optimizer::save wrote: the parameters' keys in hex.
torch::serialize::OutputArchive HexKeyedAdamArchive(const std::vector<at::Tensor>& params, double lr) {
  torch::serialize::OutputArchive archive;
  archive.write("pytorch_version", c10::IValue("1.5.0"));
  const std::vector<std::string> keys = {"0x55d5c3a01000", "0x55d5c3a02000"};
  torch::serialize::OutputArchive state(archive.compilation_unit());
  for (size_t i = 0; i < params.size(); ++i) {
    torch::optim::AdamParamState one;
    one.step(5);
    one.exp_avg(at::full(params[i].sizes(), static_cast<float>(i + 1)));
    one.exp_avg_sq(at::full(params[i].sizes(), 0.5f));
    torch::serialize::OutputArchive one_archive(archive.compilation_unit());
    one.serialize(one_archive);
    state.write(keys[i], one_archive);
  }
  archive.write("state", state);
  torch::serialize::OutputArchive groups(archive.compilation_unit());
  groups.write("param_groups/size", at::full({}, 1, at::kLong));
  torch::serialize::OutputArchive group(archive.compilation_unit());
  group.write("params/size", at::full({}, static_cast<int64_t>(params.size()), at::kLong));
  for (size_t i = 0; i < params.size(); ++i) group.write("params/" + std::to_string(i), c10::IValue(keys[i]));
  torch::serialize::OutputArchive options(archive.compilation_unit());
  torch::optim::AdamOptions(lr).serialize(options);
  group.write("options", options);
  groups.write("param_groups/0", group);
  archive.write("param_groups", groups);
  return archive;
}

TEST(OptimizerStateTest, ReadsWhatThisVersionWrites) {
  std::vector<at::Tensor> params = Params();
  torch::optim::Adam written(params, torch::optim::AdamOptions(0.01));
  for (at::Tensor& p : params) p.mutable_grad() = at::full(p.sizes(), 1.0f);
  written.step();
  torch::serialize::OutputArchive archive;
  written.save(archive);
  torch::serialize::InputArchive input = Reopen(archive);

  std::vector<at::Tensor> fresh = Params();
  torch::optim::Adam loaded(fresh, torch::optim::AdamOptions(0.5));
  LoadOptimizer(loaded, input);
  // After one step with gradient 1, Adam's first moment is (1 - beta1) * 1.
  EXPECT_TRUE(StateFits(loaded, fresh, {0.1f, 0.1f}));
}

TEST(OptimizerStateTest, ReadsLibTorch113sHexKeys) {
  std::vector<at::Tensor> params = Params();
  torch::serialize::OutputArchive written = HexKeyedAdamArchive(params, 0.25);
  torch::serialize::InputArchive input = Reopen(written);
  torch::optim::Adam adam(params, torch::optim::AdamOptions(0.5));
  LoadOptimizer(adam, input);
  EXPECT_TRUE(StateFits(adam, params, {1.0f, 2.0f}));
  // The saved options are restored too.
  EXPECT_EQ(static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options()).lr(), 0.25);
  // Why the adapter exists: LibTorch 2.x's own load parses the hex keys as decimal. Should it stop doing so, this
  // fails, and LoadOptimizer can hand every optimizer to load().
  std::vector<at::Tensor> other = Params();
  torch::serialize::OutputArchive again = HexKeyedAdamArchive(other, 0.25);
  torch::serialize::InputArchive reopened = Reopen(again);
  torch::optim::Adam native(other, torch::optim::AdamOptions(0.5));
  try {
    native.load(reopened);
    EXPECT_FALSE(StateFits(native, other, {1.0f, 2.0f})) << "LibTorch's load now reads 1.13's keys";
  } catch (const std::exception&) {
    // Refusing is as good a sign as misplacing.
  }
}

TEST(OptimizerStateTest, AnArchiveThatDoesNotFitChangesNothing) {
  std::vector<at::Tensor> three = {at::randn({2}).requires_grad_(), at::randn({3}).requires_grad_(),
                                   at::randn({4}).requires_grad_()};
  torch::serialize::OutputArchive written = HexKeyedAdamArchive(Params(), 0.25);
  torch::serialize::InputArchive input = Reopen(written);
  torch::optim::Adam adam(three, torch::optim::AdamOptions(0.5));
  EXPECT_THROW(LoadOptimizer(adam, input), c10::Error);
  EXPECT_TRUE(adam.state().empty());
  EXPECT_EQ(static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options()).lr(), 0.5);
}

}  // namespace
}  // namespace kiln::compat
