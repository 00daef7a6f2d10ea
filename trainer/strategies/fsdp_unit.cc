#include "trainer/strategies/fsdp_unit.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "ATen/CPUGeneratorImpl.h"
#include "torch/csrc/autograd/autograd.h"
#include "torch/csrc/autograd/custom_function.h"

namespace kiln {
namespace {

// A class name without its namespace and without LibTorch's "Impl": "torch::nn::LinearImpl" -> "Linear".
absl::string_view ShortTypeName(absl::string_view name) {
  if (const size_t colon = name.rfind("::"); colon != absl::string_view::npos) name.remove_prefix(colon + 2);
  return absl::StripSuffix(name, "Impl");
}

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : absl::StrCat(prefix, ".", name);
}

class Wrapper {
 public:
  Wrapper(const FsdpWrapPolicy& policy, FsdpUnitHooks* hooks, FsdpWrapping& out)
      : policy_(policy), hooks_(hooks), out_(out) {}

  void Visit(torch::nn::Module& module, const std::string& name) {
    for (const auto& child : module.named_children()) Visit(*child.value(), Join(name, child.key()));
    auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&module);
    // Each child the policy picks becomes a unit (bottom-up: its own picked children first); its parameters are
    // gathered when an operator reads them (gather_on_use.h). Only activation checkpointing needs the module's
    // forward itself: such a child is wrapped where it is an element of a Sequential.
    std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> picked;
    for (const auto& child : module.named_children()) {
      if (Picks(*child.value())) picked.emplace_back(child.key(), child.value());
    }
    if (picked.empty()) return;
    std::unordered_set<const torch::nn::Module*> wrap;
    for (const auto& [key, child] : picked) {
      const bool checkpointed = OfType(*child, policy_.checkpoint_types);
      if (checkpointed && sequential != nullptr) {
        wrap.insert(child.get());
      } else if (checkpointed) {
        out_.unwrappable.push_back(Join(name, key));
      }
    }
    // A Sequential's elements as it calls them (AnyModule), by module.
    std::unordered_map<const torch::nn::Module*, torch::nn::AnyModule> elements;
    if (!wrap.empty()) {
      const auto children = sequential->named_children();
      size_t index = 0;
      for (const torch::nn::AnyModule& element : *sequential) elements.emplace(children[index++].value().get(), element);
    }
    std::unordered_map<const torch::nn::Module*, std::shared_ptr<FsdpUnitImpl>> wrappers;
    for (const auto& [key, child] : picked) {
      std::shared_ptr<FsdpUnitImpl> unit;
      if (wrap.count(child.get()) != 0) {
        child->name();  // Cached now, so that the wrapper takes the module's type name with its members.
        unit = std::make_shared<FsdpUnitImpl>(child, elements.at(child.get()), next_index_, hooks_);
        unit->set_checkpointed(true);
        wrappers[child.get()] = unit;
      }
      for (const at::Tensor& parameter : child->parameters()) in_units_.insert(parameter.unsafeGetTensorImpl());
      out_.units.push_back({Join(name, key), unit, child});
      ++next_index_;
    }
    if (wrappers.empty()) return;
    const auto children = sequential->named_children();
    torch::nn::SequentialImpl replacement;
    size_t index = 0;
    for (const torch::nn::AnyModule& element : *sequential) {
      const auto& child = children[index++];
      const auto wrapper = wrappers.find(child.value().get());
      replacement.push_back(child.key(), wrapper == wrappers.end() ? element : torch::nn::AnyModule(wrapper->second));
    }
    // From a const reference: SequentialImpl's variadic constructor would take a non-const one as an element.
    out_.originals.emplace_back(sequential, std::as_const(*sequential));
    *sequential = replacement;
  }

 private:
  // Whether `module`'s type is one of `types` (spelt with or without namespace and Impl).
  static bool OfType(const torch::nn::Module& module, const std::vector<std::string>& types) {
    const std::string type = FsdpTypeName(module);
    for (const std::string& wanted : types) {
      if (ShortTypeName(wanted) == type) return true;
    }
    return false;
  }

  bool Picks(torch::nn::Module& module) const {
    if (dynamic_cast<FsdpUnitImpl*>(&module) != nullptr) return false;
    if (OfType(module, policy_.module_types) || OfType(module, policy_.checkpoint_types)) return true;
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
  int next_index_ = 0;
  FsdpWrapping& out_;
  std::unordered_set<const c10::TensorImpl*> in_units_;
};

}  // namespace

FsdpUnitImpl::FsdpUnitImpl(std::shared_ptr<torch::nn::Module> module, torch::nn::AnyModule inner, int index,
                           FsdpUnitHooks* hooks)
    : torch::nn::Module(*module), module_(std::move(module)), inner_(std::move(inner)), index_(index), hooks_(hooks) {}

namespace {

// The module's forward without its activations kept: they are made again in the backward pass. The parameters are
// inputs, so that the output needs a gradient whenever they do (even for an input that does not: the data); their
// gradients come from the backward pass run here (AccumulateGrad), not from this node's outputs.
struct CheckpointedForward : public torch::autograd::Function<CheckpointedForward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::TensorList& parameters, torch::nn::AnyModule* module) {
    ctx->save_for_backward({input});
    ctx->saved_data["module"] = reinterpret_cast<int64_t>(module);
    ctx->saved_data["parameters"] = static_cast<int64_t>(parameters.size());
    ctx->saved_data["input_needs_grad"] = input.requires_grad();
    ctx->saved_data["cpu_generator"] = at::detail::getDefaultCPUGenerator().get_state();
    return module->forward<at::Tensor>(input);  // Autograd records nothing inside a Function's forward.
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto* module = reinterpret_cast<torch::nn::AnyModule*>(ctx->saved_data["module"].toInt());
    const bool input_needs_grad = ctx->saved_data["input_needs_grad"].toBool();
    at::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(input_needs_grad);
    at::Tensor output;
    {
      // The first run's random numbers (dropout), and the generator as it was afterwards.
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      const at::Tensor after = generator.get_state();
      generator.set_state(ctx->saved_data["cpu_generator"].toTensor());
      at::AutoGradMode enable(true);
      output = module->forward<at::Tensor>(input);
      generator.set_state(after);
    }
    torch::autograd::backward({output}, {grad_outputs[0]});
    torch::autograd::variable_list grads(2 + ctx->saved_data["parameters"].toInt());
    if (input_needs_grad) grads[0] = input.grad();
    return grads;
  }
};

}  // namespace

at::Tensor FsdpUnitImpl::forward(at::Tensor input) {
  if (hooks_ == nullptr) return inner_.forward<at::Tensor>(std::move(input));
  hooks_->BeforeForward(index_);
  at::Tensor output;
  if (checkpointed_ && at::GradMode::is_enabled()) {
    const std::vector<at::Tensor> parameters = module_->parameters();
    output = CheckpointedForward::apply(input, parameters, &inner_);
  } else {
    output = inner_.forward<at::Tensor>(std::move(input));
  }
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
  for (Unit& unit : units) {
    if (unit.unit != nullptr) unit.unit->DetachHooks();
  }
}

FsdpWrapping WrapForFsdp(torch::nn::Module& model, const FsdpWrapPolicy& policy, FsdpUnitHooks* hooks) {
  FsdpWrapping wrapping;
  Wrapper(policy, hooks, wrapping).Visit(model, "");
  return wrapping;
}

std::string FsdpTypeName(const torch::nn::Module& module) {
  return std::string(ShortTypeName(module.name()));
}

}  // namespace kiln
