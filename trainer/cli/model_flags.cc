// Which model to train.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

ABSL_FLAG(std::string, model, "mlp",
          "\"mlp\" (multi-layer perceptron), \"cnn\" (small convolutional network), or the path of a TorchScript "
          "module (e.g. model.pt, saved with torch.jit.script(model).save(path)), trained with its own parameters.");
ABSL_FLAG(std::string, hidden_sizes, "64,64", "mlp: hidden layer widths, comma-separated (\"\": a linear model).");
ABSL_FLAG(std::string, channels, "16,32", "cnn: output channels of each convolution, comma-separated.");
ABSL_FLAG(int64_t, kernel_size, 3, "cnn: convolution kernel size (odd).");
ABSL_FLAG(std::string, input_shape, "",
          "Shape of one example as C,H,W (e.g. 1,8,8): feature rows are reshaped to it before the model sees them. "
          "Needed by cnn unless the feature count is a square (then 1,S,S); optional for TorchScript modules.");
ABSL_FLAG(std::string, optimizer, "adam",
          "\"adam\", \"adamw\" or \"sgd\" (torch.optim's Adam, AdamW, SGD; LightningCLI's class names work too).");
ABSL_FLAG(double, learning_rate, 1e-3, "The optimizer's learning rate.");
ABSL_FLAG(double, momentum, 0.9, "sgd: the momentum, in [0, 1) (Kiln's default 0.9; PyTorch's SGD has 0).");
ABSL_FLAG(double, weight_decay, -1,
          "The optimizer's weight decay, >= 0; -1: PyTorch's default for it (0; adamw 0.01).");
ABSL_FLAG(bool, fused_optimizer, true,
          "Step the optimizer with LibTorch's fused kernels (one pass over each device's parameters; CPU and CUDA), "
          "which also lets the device skip a non-finite loss's update without the host waiting for it. false: "
          "torch::optim's Adam or SGD, unchanged.");
