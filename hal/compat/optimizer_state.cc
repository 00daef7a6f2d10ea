#include "hal/compat/optimizer_state.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "c10/util/Exception.h"
#include "torch/optim/adagrad.h"
#include "torch/optim/adam.h"
#include "torch/optim/adamw.h"
#include "torch/optim/rmsprop.h"
#include "torch/optim/sgd.h"

namespace kiln::compat {

const torch::optim::OptimizerParamState* StateOf(const torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto found = optimizer.state().find(param.unsafeGetTensorImpl());
  return found == optimizer.state().end() ? nullptr : found->second.get();
}

void SetStateOf(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                std::unique_ptr<torch::optim::OptimizerParamState> state) {
  auto key = param.unsafeGetTensorImpl();
  if (state == nullptr) {
    optimizer.state().erase(key);
  } else {
    optimizer.state()[key] = std::move(state);
  }
}

namespace {

// Everything read from the archive before the optimizer is touched.
template <typename Options>
struct SavedGroup {
  std::vector<std::string> keys;
  Options options{0};
};

// Optimizer::load's work for one of LibTorch's optimizers, with the parameter keys compared as text.
template <typename State, typename Options>
void LoadKeyedAsText(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  c10::IValue version;
  archive.read("pytorch_version", version);
  TORCH_CHECK(version.isString() && version.toStringRef() == "1.5.0", "the optimizer archive has format version ",
              version, ", not LibTorch's 1.5.0");
  torch::serialize::InputArchive state_archive;
  archive.read("state", state_archive);
  std::map<std::string, std::unique_ptr<State>> saved_state;
  for (const std::string& key : state_archive.keys()) {
    torch::serialize::InputArchive one;
    state_archive.read(key, one);
    auto state = std::make_unique<State>();
    state->serialize(one);
    saved_state[key] = std::move(state);
  }

  torch::serialize::InputArchive groups_archive;
  archive.read("param_groups", groups_archive);
  at::Tensor groups_size;
  groups_archive.read("param_groups/size", groups_size);
  TORCH_CHECK(
      groups_size.numel() == 1 && groups_size.item<int64_t>() == static_cast<int64_t>(optimizer.param_groups().size()),
      "the optimizer archive has ", groups_size.numel() == 1 ? groups_size.item<int64_t>() : -1,
      " parameter group(s) but the optimizer has ", optimizer.param_groups().size());
  std::vector<SavedGroup<Options>> groups(optimizer.param_groups().size());
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::InputArchive group_archive;
    groups_archive.read("param_groups/" + std::to_string(i), group_archive);
    at::Tensor size;
    group_archive.read("params/size", size);
    const size_t params = optimizer.param_groups()[i].params().size();
    TORCH_CHECK(size.numel() == 1 && size.item<int64_t>() == static_cast<int64_t>(params), "parameter group ", i,
                " of the optimizer archive has ", size.numel() == 1 ? size.item<int64_t>() : -1,
                " parameters but the optimizer's has ", params);
    for (size_t index = 0; index < params; ++index) {
      c10::IValue key;
      group_archive.read("params/" + std::to_string(index), key);
      TORCH_CHECK(key.isString(), "parameter key ", index, " of group ", i, " is not text");
      groups[i].keys.push_back(key.toStringRef());
    }
    torch::serialize::InputArchive options_archive;
    group_archive.read("options", options_archive);
    groups[i].options.serialize(options_archive);
  }

  // Apply: what 2.x's Optimizer::load does, once everything has been read.
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::optim::OptimizerParamGroup& group = optimizer.param_groups()[i];
    const std::vector<at::Tensor>& params = group.params();
    for (size_t index = 0; index < params.size(); ++index) {
      auto found = saved_state.find(groups[i].keys[index]);
      if (found == saved_state.end() || found->second == nullptr) continue;
      optimizer.state()[params[index].unsafeGetTensorImpl()] = std::move(found->second);
    }
    static_cast<Options&>(group.options()) = groups[i].options;
  }
}

}  // namespace

void LoadOptimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  using namespace torch::optim;
  if (dynamic_cast<AdamW*>(&optimizer) != nullptr)
    return LoadKeyedAsText<AdamWParamState, AdamWOptions>(optimizer, archive);
  if (dynamic_cast<Adam*>(&optimizer) != nullptr)
    return LoadKeyedAsText<AdamParamState, AdamOptions>(optimizer, archive);
  if (dynamic_cast<SGD*>(&optimizer) != nullptr) return LoadKeyedAsText<SGDParamState, SGDOptions>(optimizer, archive);
  if (dynamic_cast<RMSprop*>(&optimizer) != nullptr) {
    return LoadKeyedAsText<RMSpropParamState, RMSpropOptions>(optimizer, archive);
  }
  if (dynamic_cast<Adagrad*>(&optimizer) != nullptr) {
    return LoadKeyedAsText<AdagradParamState, AdagradOptions>(optimizer, archive);
  }
  optimizer.load(archive);
}

}  // namespace kiln::compat
