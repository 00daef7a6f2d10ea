// The baseline for start-up time: a program that links LibTorch, builds the default MLP (16 -> 64 -> 64 -> 4) and
// runs one Adam step on a batch of 64, then exits. Kiln's `fit` doing the same work is compared with it.
#include "ATen/ATen.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"

int main() {
  torch::nn::Sequential net{torch::nn::Linear(16, 64), torch::nn::ReLU(), torch::nn::Linear(64, 64),
                            torch::nn::ReLU(), torch::nn::Linear(64, 4)};
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));
  adam.zero_grad();
  torch::nn::functional::cross_entropy(net->forward(at::randn({64, 16})), at::randint(4, {64})).backward();
  adam.step();
  return 0;
}
