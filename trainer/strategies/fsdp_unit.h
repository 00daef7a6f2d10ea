// FSDP units: the modules FSDPStrategy gathers and frees as one piece, and the auto-wrap policy that picks them.
//
// A unit is any registered submodule the policy picks (by type, by size), wherever it sits: an element of a
// torch::nn::Sequential, a member its parent calls itself (`fc1->forward(x)`), a module inside a module the model
// calls through TorchScript's mirror. Nothing is put in its place: its parameters stay the module's own tensors, and
// FSDPStrategy gathers them when an operator reads them (gather_on_use.h), since LibTorch's modules have no forward
// hooks. Only activation checkpointing needs the module's forward itself (to run it again in the backward pass): a
// module of an activation_checkpointing_policy type that is an element of a Sequential is wrapped by FsdpUnitImpl,
// which holds the module's own parameters, buffers and children under the same names (the model's
// named_parameters() and state_dict are unchanged). One called as a member cannot be wrapped: it is a unit, not
// checkpointed (WrapForFsdp says which, in `unwrappable`).
//
// Thread-safety: the loop thread; a unit's forward runs where the model's forward runs.
#ifndef KILN_TRAINER_STRATEGIES_FSDP_UNIT_H_
#define KILN_TRAINER_STRATEGIES_FSDP_UNIT_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "torch/nn/module.h"
#include "torch/nn/modules/container/any.h"
#include "torch/nn/modules/container/sequential.h"
#include "trainer/strategies/fsdp_options.h"  // FsdpWrapPolicy

namespace kiln {

// What a unit calls around its module's forward; the strategy implements it.
class FsdpUnitHooks {
 public:
  virtual ~FsdpUnitHooks() = default;
  // Before the module's forward: the unit's parameters are made whole (a collective).
  virtual void BeforeForward(int unit) = 0;
  // After it, with its output: returns the output the model goes on with (the same values; the strategy may free the
  // parameters and hook the output's gradient).
  virtual at::Tensor AfterForward(int unit, at::Tensor output) = 0;
};

class FsdpUnitImpl : public torch::nn::Module {
 public:
  // Wraps `module` (held by `inner` too) as unit `index`. Takes the module's parameters, buffers and children under
  // their names, and its type name (so summaries show the module, not the wrapper).
  FsdpUnitImpl(std::shared_ptr<torch::nn::Module> module, torch::nn::AnyModule inner, int index,
               FsdpUnitHooks* hooks);
  // Activation checkpointing (Lightning's activation_checkpointing_policy): when gradients are on, the module's
  // forward keeps none of its activations, only its input, and runs again during its backward to make them (with
  // the CPU generator's state of the first run, so that dropout draws the same). Gradients are unchanged.
  void set_checkpointed(bool on) { checkpointed_ = on; }
  bool checkpointed() const { return checkpointed_; }

  at::Tensor forward(at::Tensor input);
  // The wrapped module follows the mode too (its own flag is read by Dropout, BatchNorm).
  void train(bool on = true) override;
  void pretty_print(std::ostream& stream) const override;

  const std::shared_ptr<torch::nn::Module>& module() const { return module_; }
  // No strategy any more (after the run): the forward is the module's alone.
  void DetachHooks() { hooks_ = nullptr; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  torch::nn::AnyModule inner_;
  int index_;
  FsdpUnitHooks* hooks_;
  bool checkpointed_ = false;
};

// The units WrapForFsdp picked, in the order picked (inner units before the units around them), and how to undo the
// wrapping of those it wrapped.
struct FsdpWrapping {
  struct Unit {
    std::string name;  // The module's name in the model ("net.0").
    // The wrapper put in a Sequential's place (activation checkpointing); null for a unit that is not wrapped.
    std::shared_ptr<FsdpUnitImpl> unit;
    std::shared_ptr<torch::nn::Module> module;  // The module itself.
  };
  std::vector<Unit> units;
  // Modules of an activation_checkpointing_policy type that are not elements of a Sequential, by name: they are units,
  // but their activations are kept (no wrapper can run their forward again).
  std::vector<std::string> unwrappable;
  // Each Sequential changed, with its elements before.
  std::vector<std::pair<torch::nn::SequentialImpl*, torch::nn::SequentialImpl>> originals;

  // Puts every Sequential's elements back as they were and detaches the units. Never throws.
  void Restore();
};

// Picks the units of `model` by `policy` (bottom-up), numbering them from 0 in the order picked, and wraps those that
// activation checkpointing needs wrapped (FsdpWrapping::Unit::unit).
FsdpWrapping WrapForFsdp(torch::nn::Module& model, const FsdpWrapPolicy& policy, FsdpUnitHooks* hooks);

// The type name the policy matches: LibTorch's class name without its namespace and "Impl" ("Linear").
std::string FsdpTypeName(const torch::nn::Module& module);

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_FSDP_UNIT_H_
