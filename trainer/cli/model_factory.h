// The model of `//trainer:fit`, built from --model and the other model flags (ModelSpec) for the loaded data: the
// built-in MLP or ConvNet, or a TorchScript module from a file. The model's hyper-parameters (what it was built
// with) are saved on it, for checkpoints and loggers.
#ifndef KILN_TRAINER_CLI_MODEL_FACTORY_H_
#define KILN_TRAINER_CLI_MODEL_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/cli/data_factory.h"
#include "trainer/cli/fit_config.h"
#include "trainer/models/supervised_module.h"

namespace kiln {

// Builds the model and runs one example through it to check that its outputs fit the task. InvalidArgument (or
// NotFound for a missing TorchScript file) names the flag or the shapes that do not fit; ResourceExhausted names the
// sizes when the parameters cannot be allocated. Seed LibTorch's generator first: the built-in models draw their
// initial parameters from it.
absl::StatusOr<std::shared_ptr<SupervisedModule>> MakeModel(const ModelSpec& spec, const LoadedData& data);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_MODEL_FACTORY_H_
