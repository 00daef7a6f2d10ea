#include "trainer/strategies/fsdp_unit.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kiln {
namespace {

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : absl::StrCat(prefix, ".", name);
}

class Wrapper {
 public:
  Wrapper(const FsdpWrapPolicy& policy, FsdpUnitHooks* hooks, int first_index, FsdpWrapping& out)
      : policy_(policy), hooks_(hooks), next_index_(first_index), out_(out) {}

  void Visit(torch::nn::Module& module, const std::string& name) {
    for (const auto& child : module.named_children()) Visit(*child.value(), Join(name, child.key()));
    auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&module);
    if (sequential == nullptr) {
      for (const auto& child : module.named_children()) {
        if (Picks(*child.value())) out_.unwrappable.push_back(Join(name, child.key()));
      }
      return;
    }
    const auto children = sequential->named_children();
    torch::nn::SequentialImpl replacement;
    bool changed = false;
    size_t index = 0;
    for (const torch::nn::AnyModule& element : *sequential) {
      const std::string& key = children[index].key();
      const std::shared_ptr<torch::nn::Module>& child = children[index].value();
      ++index;
      if (!Picks(*child)) {
        replacement.push_back(key, element);
        continue;
      }
      child->name();  // Cached now, so that the wrapper takes the module's type name with its members.
      auto unit = std::make_shared<FsdpUnitImpl>(child, element, next_index_++, hooks_);
      for (const at::Tensor& parameter : child->parameters()) in_units_.insert(parameter.unsafeGetTensorImpl());
      out_.units.push_back({Join(name, key), unit});
      replacement.push_back(key, torch::nn::AnyModule(unit));
      changed = true;
    }
    if (changed) {
      // From a const reference: SequentialImpl's variadic constructor would take a non-const one as an element.
      out_.originals.emplace_back(sequential, std::as_const(*sequential));
      *sequential = replacement;
    }
  }

 private:
  bool Picks(torch::nn::Module& module) const {
    if (dynamic_cast<FsdpUnitImpl*>(&module) != nullptr) return false;
    const std::string type = FsdpTypeName(module);
    for (const std::string& wanted : policy_.module_types) {
      absl::string_view short_name = wanted;
      if (const size_t colon = short_name.rfind("::"); colon != absl::string_view::npos) {
        short_name.remove_prefix(colon + 2);
      }
      short_name = absl::StripSuffix(short_name, "Impl");
      if (short_name == type) return true;
    }
    if (policy_.min_num_params <= 0) return false;
    int64_t remaining = 0;
    std::unordered_set<const c10::TensorImpl*> seen;
    for (const at::Tensor& parameter : module.parameters()) {
      const c10::TensorImpl* impl = parameter.unsafeGetTensorImpl();
      if (in_units_.count(impl) == 0 && seen.insert(impl).second) remaining += parameter.numel();
    }
    return remaining >= policy_.min_num_params;
  }

  const FsdpWrapPolicy& policy_;
  FsdpUnitHooks* hooks_;
  int next_index_;
  FsdpWrapping& out_;
  std::unordered_set<const c10::TensorImpl*> in_units_;
};

}  // namespace

FsdpUnitImpl::FsdpUnitImpl(std::shared_ptr<torch::nn::Module> module, torch::nn::AnyModule inner, int index,
                           FsdpUnitHooks* hooks)
    : torch::nn::Module(*module), module_(std::move(module)), inner_(std::move(inner)), index_(index), hooks_(hooks) {}

at::Tensor FsdpUnitImpl::forward(at::Tensor input) {
  if (hooks_ == nullptr) return inner_.forward<at::Tensor>(std::move(input));
  hooks_->BeforeForward(index_);
  at::Tensor output = inner_.forward<at::Tensor>(std::move(input));
  return hooks_->AfterForward(index_, std::move(output));
}

void FsdpUnitImpl::train(bool on) {
  torch::nn::Module::train(on);
  module_->train(on);
}

void FsdpUnitImpl::pretty_print(std::ostream& stream) const { module_->pretty_print(stream); }

void FsdpWrapping::Restore() {
  for (auto it = originals.rbegin(); it != originals.rend(); ++it) *it->first = it->second;
  originals.clear();
  for (Unit& unit : units) unit.unit->DetachHooks();
}

FsdpWrapping WrapForFsdp(torch::nn::Module& model, const FsdpWrapPolicy& policy, FsdpUnitHooks* hooks,
                         int first_index) {
  FsdpWrapping wrapping;
  Wrapper(policy, hooks, first_index, wrapping).Visit(model, "");
  return wrapping;
}

std::string FsdpTypeName(const torch::nn::Module& module) {
  const std::string& full = module.name();
  absl::string_view name = full;
  if (const size_t colon = name.rfind("::"); colon != absl::string_view::npos) name.remove_prefix(colon + 2);
  return std::string(absl::StripSuffix(name, "Impl"));
}

}  // namespace kiln
