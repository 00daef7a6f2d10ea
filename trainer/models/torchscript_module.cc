#include "trainer/models/torchscript_module.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "torch/csrc/jit/serialization/import.h"
#include "trainer/core/option_fix.h"

namespace kiln {
namespace {

// A script (sub)module seen as a torch::nn::Module: the same parameter and buffer tensors, the same names, and
// children for the script's submodules. Holds no behaviour; TorchScriptModule::forward runs the script.
class ScriptLayer final : public torch::nn::Module {
 public:
  explicit ScriptLayer(const torch::jit::Module& script) : torch::nn::Module(TypeName(script)) {
    Mirror(*this, script);
  }

  static std::string TypeName(const torch::jit::Module& script) {
    return script.type()->name().has_value() ? script.type()->name()->name() : "ScriptModule";
  }

  // Registers `script`'s own parameters and buffers on `module`, and one ScriptLayer per child.
  static void Mirror(torch::nn::Module& module, const torch::jit::Module& script) {
    for (const auto& parameter : script.named_parameters(/*recurse=*/false)) {
      module.register_parameter(parameter.name, parameter.value, parameter.value.requires_grad());
    }
    for (const auto& buffer : script.named_buffers(/*recurse=*/false)) {
      module.register_buffer(buffer.name, buffer.value);
    }
    for (const auto& child : script.named_children()) {
      module.register_module(child.name, std::make_shared<ScriptLayer>(child.value));
    }
  }
};

// Whether train()/eval() can reach every submodule: Python's modules all have `training`; modules built in C++
// have it only when they registered it.
bool HasTrainingFlag(const torch::jit::Module& script) {
  for (const torch::jit::Module& module : script.modules()) {
    if (!module.type()->hasAttribute("training")) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::shared_ptr<TorchScriptModule>> TorchScriptModule::Load(const std::string& path,
                                                                           SupervisedOptions options) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return absl::NotFoundError(absl::StrCat("no TorchScript file ", path,
                                            "; pass ",
                                            OptionFix("the path", "--model=mlp, --model=cnn or the path"),
                                            " of a module saved with torch.jit.script(model).save(path)"));
  }
  torch::jit::Module script;
  try {
    script = torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a TorchScript module this LibTorch can load (",
                                                   e.what_without_backtrace(),
                                                   "); save one in Python with torch.jit.script(model).save(path)"));
  }
  if (!script.find_method("forward").has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("the TorchScript module in ", path, " has no forward method"));
  }
  bool trainable = false;
  for (const at::Tensor& parameter : script.parameters()) trainable = trainable || parameter.requires_grad();
  if (!trainable) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the TorchScript module in ", path,
        " has no parameter that requires gradients, so there is nothing to "
        "train; save it from a module whose parameters have requires_grad=True (not a frozen or traced-under-no_grad "
        "copy)"));
  }
  return std::make_shared<TorchScriptModule>(std::move(script), std::move(options));
}

namespace {

// The type forward's first argument (after self) takes, as TorchScript writes it ("Tensor", "Dict(str, Tensor)").
// What forward returned, which must be one tensor.
at::Tensor OneTensor(const c10::IValue& output) {
  TORCH_CHECK(output.isTensor(), "the TorchScript module's forward must return one tensor, it returned ",
              output.tagKind());
  return output.toTensor();
}

c10::TypePtr InputType(const torch::jit::Module& script) {
  const std::vector<c10::Argument>& arguments = script.get_method("forward").function().getSchema().arguments();
  return arguments.size() > 1 ? arguments[1].type() : c10::NoneType::get();
}

}  // namespace

TorchScriptModule::TorchScriptModule(torch::jit::Module script, SupervisedOptions options)
    : SupervisedModule(std::move(options)), script_(std::move(script)), input_type_(InputType(script_)) {
  ScriptLayer::Mirror(*this, script_);
  if (HasTrainingFlag(script_)) script_.train(is_training());
}


at::Tensor TorchScriptModule::forward(const at::Tensor& input) {
  const c10::TypePtr& takes = input_type_;
  TORCH_CHECK_VALUE(takes->kind() == c10::TypeKind::TensorType, "the TorchScript module's forward takes ",
                    takes->annotation_str(), ", not one tensor: give it batches of that structure (a DataModule "
                    "whose loaders make them, e.g. a TensorDataLoader of named tensors)");
  return OneTensor(script_.forward({input}));
}

at::Tensor TorchScriptModule::forward_structured(const c10::IValue& data) {
  const c10::TypePtr& takes = input_type_;
  TORCH_CHECK_VALUE(takes->kind() != c10::TypeKind::TensorType, "this model takes one input tensor, but the batch "
                    "is ", data.tagKind(), ": the TorchScript module's forward takes a Tensor; script one whose "
                    "forward takes the batch's structure (def forward(self, batch: Dict[str, Tensor]))");
  return OneTensor(script_.forward({data}));
}

void TorchScriptModule::train(bool on) {
  SupervisedModule::train(on);
  if (HasTrainingFlag(script_)) script_.train(on);
}

}  // namespace kiln
