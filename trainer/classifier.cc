#include "trainer/classifier.h"

#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"

namespace kiln {
namespace {

at::Tensor Accuracy(const at::Tensor& logits, const at::Tensor& target) {
  return logits.argmax(1).eq(target).to(at::kFloat).mean();
}

}  // namespace

MlpClassifier::MlpClassifier(const MlpOptions& options) : options_(options) {
  int64_t in = options.input_size;
  for (int64_t hidden : options.hidden_sizes) {
    net_->push_back(torch::nn::Linear(in, hidden));
    net_->push_back(torch::nn::ReLU());
    in = hidden;
  }
  net_->push_back(torch::nn::Linear(in, options.num_classes));
  register_module("net", net_);
}

at::Tensor MlpClassifier::forward(const at::Tensor& input) { return net_->forward(input); }

at::Tensor MlpClassifier::training_step(const Batch& batch, int64_t batch_idx) {
  at::Tensor logits = forward(batch.input);
  at::Tensor loss = torch::nn::functional::cross_entropy(logits, batch.target);
  log("train_loss", loss, {.prog_bar = true, .on_step = true, .on_epoch = true});
  log("train_acc", Accuracy(logits, batch.target), {.on_step = false, .on_epoch = true});
  return loss;
}

void MlpClassifier::validation_step(const Batch& batch, int64_t batch_idx) {
  at::Tensor logits = forward(batch.input);
  // sync_dist: with several processes, each validates its shard; the logged value is their mean.
  log("val_loss", torch::nn::functional::cross_entropy(logits, batch.target), {.prog_bar = true, .sync_dist = true});
  log("val_acc", Accuracy(logits, batch.target), {.prog_bar = true, .sync_dist = true});
}

void MlpClassifier::test_step(const Batch& batch, int64_t batch_idx) {
  at::Tensor logits = forward(batch.input);
  log("test_loss", torch::nn::functional::cross_entropy(logits, batch.target));
  log("test_acc", Accuracy(logits, batch.target));
}

OptimizerConfig MlpClassifier::configure_optimizers() {
  return std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(options_.learning_rate));
}

}  // namespace kiln
