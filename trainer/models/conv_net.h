// ConvNet: the built-in small convolutional network for images, as a SupervisedModule.
//
// For each entry of `channels`: Conv2d(kernel_size, padding kernel_size / 2) -> ReLU -> MaxPool2d(2) (the pooling
// only while the image is at least 2x2); then Flatten -> Linear to the outputs. kConvNetDescription says so in
// hparams.yaml, so that the model can be rebuilt elsewhere from a run's files. Inputs are images [N, C, H, W]:
// SupervisedOptions::input_shape turns feature rows into them.
#ifndef KILN_TRAINER_MODELS_CONV_NET_H_
#define KILN_TRAINER_MODELS_CONV_NET_H_

#include <cstdint>
#include <vector>

#include "torch/nn/modules/container/sequential.h"
#include "trainer/models/supervised_module.h"

namespace kiln {

inline constexpr char kConvNetActivation[] = "relu";
inline constexpr char kConvNetPadding[] = "same (kernel_size / 2)";
inline constexpr char kConvNetPooling[] = "max_pool2d(2) after each convolution while the image is at least 2x2";

struct ConvNetSizes {
  std::vector<int64_t> input_shape = {1, 8, 8};  // C, H, W.
  std::vector<int64_t> channels = {16, 32};
  int64_t kernel_size = 3;  // Odd, so that padding keeps the image size.
  int64_t num_outputs = 10;
};

class ConvNet final : public SupervisedModule {
 public:
  // Sizes must be positive and input_shape three values (callers check user input first).
  ConvNet(const ConvNetSizes& sizes, SupervisedOptions options);
  at::Tensor forward(const at::Tensor& input) override;

 private:
  torch::nn::Sequential features_;
  torch::nn::Sequential classifier_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_MODELS_CONV_NET_H_
