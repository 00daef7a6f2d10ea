// A LightningModule around a TorchScript module whose parameters it registers as its own (the same tensors), so
// that toggle_optimizer, summaries and checkpoints see them; the examples' custom modules derive from it.
#ifndef KILN_EXAMPLES_REAL_MODELS_SCRIPT_MODULE_H_
#define KILN_EXAMPLES_REAL_MODELS_SCRIPT_MODULE_H_

#include <string>

#include "absl/strings/str_replace.h"
#include "torch/script.h"
#include "trainer/kiln.h"

namespace kiln::examples {

class ScriptLightningModule : public LightningModule {
 public:
  explicit ScriptLightningModule(const std::string& path) : script_(torch::jit::load(path)) {
    for (const auto& parameter : script_.named_parameters()) {
      register_parameter(absl::StrReplaceAll(parameter.name, {{".", "__"}}), parameter.value);
    }
  }

 protected:
  torch::jit::Module script_;
};

}  // namespace kiln::examples

#endif  // KILN_EXAMPLES_REAL_MODELS_SCRIPT_MODULE_H_
