#include "trainer/models/conv_net.h"

#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/conv.h"
#include "torch/nn/modules/linear.h"
#include "torch/nn/modules/pooling.h"

namespace kiln {

ConvNet::ConvNet(const ConvNetSizes& sizes, SupervisedOptions options) : SupervisedModule(std::move(options)) {
  int64_t in = sizes.input_shape.at(0);
  int64_t height = sizes.input_shape.at(1);
  int64_t width = sizes.input_shape.at(2);
  for (int64_t out : sizes.channels) {
    features_->push_back(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, sizes.kernel_size).padding(sizes.kernel_size / 2)));
    features_->push_back(torch::nn::ReLU());
    if (height >= 2 && width >= 2) {
      features_->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
      height /= 2;
      width /= 2;
    }
    in = out;
  }
  features_->push_back(torch::nn::Flatten());
  classifier_->push_back(torch::nn::Linear(in * height * width, sizes.num_outputs));
  register_module("features", features_);
  register_module("classifier", classifier_);
}

at::Tensor ConvNet::forward(const at::Tensor& input) { return classifier_->forward(features_->forward(input)); }

}  // namespace kiln
