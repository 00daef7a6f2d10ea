#include "trainer/models/mlp.h"

#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/linear.h"

namespace kiln {

torch::nn::Sequential MlpLayers(const MlpSizes& sizes) {
  torch::nn::Sequential layers;
  int64_t in = sizes.input_size;
  for (int64_t hidden : sizes.hidden_sizes) {
    layers->push_back(torch::nn::Linear(in, hidden));
    layers->push_back(torch::nn::ReLU());
    in = hidden;
  }
  layers->push_back(torch::nn::Linear(in, sizes.num_outputs));
  return layers;
}

Mlp::Mlp(const MlpSizes& sizes, SupervisedOptions options)
    : SupervisedModule(std::move(options)), net_(MlpLayers(sizes)) {
  register_module("net", net_);
}

at::Tensor Mlp::forward(const at::Tensor& input) { return net_->forward(input.flatten(1)); }

}  // namespace kiln
