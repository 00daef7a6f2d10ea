// FSDP units: the modules FSDPStrategy gathers and frees as one piece, and the auto-wrap policy that picks them.
//
// LibTorch's C++ modules have no forward hooks, so a unit is a wrapper module Kiln puts where the module was: an
// element of a torch::nn::Sequential (which calls its elements through AnyModule, so a wrapper can stand in for any
// element whose forward takes and returns one tensor). The wrapper holds the module's own parameters, buffers and
// children under the same names (the model's named_parameters() and state_dict are unchanged), asks the strategy to
// gather the unit's parameters before the module's forward, and hands the output back through the strategy, which
// arranges the gather before the unit's backward. A module the policy picks that is not an element of a Sequential
// (a member the parent calls itself) cannot be wrapped: its parameters stay with the enclosing unit (WrapForFsdp says
// which, in `unwrappable`).
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

// The units WrapForFsdp made, in the order made (inner units before the units around them), and how to undo it.
struct FsdpWrapping {
  struct Unit {
    std::string name;  // The module's name in the model ("net.0").
    std::shared_ptr<FsdpUnitImpl> unit;
  };
  std::vector<Unit> units;
  // Modules the policy picked that are not elements of a Sequential, by name: they stay in the enclosing unit.
  std::vector<std::string> unwrappable;
  // Each Sequential changed, with its elements before.
  std::vector<std::pair<torch::nn::SequentialImpl*, torch::nn::SequentialImpl>> originals;

  // Puts every Sequential's elements back as they were and detaches the units. Never throws.
  void Restore();
};

// Wraps the modules of `model` that `policy` picks (bottom-up), numbering units from 0 in the order made.
FsdpWrapping WrapForFsdp(torch::nn::Module& model, const FsdpWrapPolicy& policy, FsdpUnitHooks* hooks);

// The type name the policy matches: LibTorch's class name without its namespace and "Impl" ("Linear").
std::string FsdpTypeName(const torch::nn::Module& module);

}  // namespace kiln

#endif  // KILN_TRAINER_STRATEGIES_FSDP_UNIT_H_
