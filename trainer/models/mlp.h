// Mlp: the built-in multi-layer perceptron, Linear -> ReLU -> ... -> Linear, as a SupervisedModule.
#ifndef KILN_TRAINER_MODELS_MLP_H_
#define KILN_TRAINER_MODELS_MLP_H_

#include <cstdint>
#include <vector>

#include "torch/nn/modules/container/sequential.h"
#include "trainer/models/supervised_module.h"

namespace kiln {

struct MlpSizes {
  int64_t input_size = 16;
  std::vector<int64_t> hidden_sizes = {64, 64};  // Empty: a linear model.
  int64_t num_outputs = 4;                       // Classes, or 1 for regression.
};

// The hidden layers' activation, by PyTorch's functional name (torch.nn.functional.relu): what a run's hparams.yaml
// says, so that the model can be rebuilt elsewhere from its files.
inline constexpr char kMlpActivation[] = "relu";

// Linear -> ReLU -> ... -> Linear, as `sizes` says: the layers of every MLP Kiln builds (Mlp, and the example
// MlpClassifier). Sizes must be positive.
torch::nn::Sequential MlpLayers(const MlpSizes& sizes);

class Mlp final : public SupervisedModule {
 public:
  // Sizes must be positive (callers check user input first).
  Mlp(const MlpSizes& sizes, SupervisedOptions options);
  at::Tensor forward(const at::Tensor& input) override;

 private:
  torch::nn::Sequential net_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_MODELS_MLP_H_
