// TorchScriptModule: trains a TorchScript module (a file saved by `torch.jit.script(model).save(path)` in Python,
// or by LibTorch) with Kiln, as a SupervisedModule, with no Python involved.
//
// The module's own parameters are trained: they are registered, as the same tensors, as this LightningModule's
// parameters (and its buffers as buffers), under the module's own names ("conv1.weight", "fc.0.bias", ...), so
// the optimizer, checkpoints, moving to a device and params_sha256 all see them. Each submodule of the script
// appears as a child named after it, whose type is the script class's name (Conv2d, Linear, ...), for the model
// summary. train()/eval() switch the script module's mode too (dropout, batch norm), when every submodule has the
// `training` attribute (Python's modules always do; a module built in C++ must register it).
//
// The module's `forward` takes one tensor (a batch, shaped by SupervisedOptions::input_shape) and returns one
// tensor (logits, or values for regression); or, for batches of named tensors (Batch::data), the whole structure
// (`def forward(self, batch: Dict[str, Tensor]) -> Tensor`), with the targets under "target".
#ifndef KILN_TRAINER_MODELS_TORCHSCRIPT_MODULE_H_
#define KILN_TRAINER_MODELS_TORCHSCRIPT_MODULE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "torch/csrc/jit/api/module.h"
#include "trainer/models/supervised_module.h"

namespace kiln {

class TorchScriptModule final : public SupervisedModule {
 public:
  // Loads `path` onto the CPU. NotFound when the file does not exist; InvalidArgument when it is not a TorchScript
  // archive, has no `forward` method or no parameter that requires gradients, with LibTorch's reason and how to
  // export one.
  static absl::StatusOr<std::shared_ptr<TorchScriptModule>> Load(const std::string& path, SupervisedOptions options);
  // Wraps a module already in memory (for tests and embedding programs).
  TorchScriptModule(torch::jit::Module script, SupervisedOptions options);

  at::Tensor forward(const at::Tensor& input) override;
  at::Tensor forward_structured(const c10::IValue& data) override;
  void train(bool on = true) override;

  const torch::jit::Module& script() const { return script_; }

 private:
  torch::jit::Module script_;
  c10::TypePtr input_type_;  // What forward's first argument takes (Tensor, Dict(str, Tensor), ...).
};

}  // namespace kiln

#endif  // KILN_TRAINER_MODELS_TORCHSCRIPT_MODULE_H_
