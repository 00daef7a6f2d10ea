#include "trainer/classifier.h"

#include "torch/nn/functional/loss.h"
#include "torch/optim/adam.h"
#include "trainer/models/mlp.h"

namespace kiln {
namespace {

at::Tensor Accuracy(const at::Tensor& logits, const at::Tensor& target) {
  return logits.argmax(1).eq(target).to(at::kFloat).mean();
}

}  // namespace

MlpClassifier::MlpClassifier(const MlpOptions& options)
    : options_(options),
      net_(MlpLayers({.input_size = options.input_size,
                      .hidden_sizes = options.hidden_sizes,
                      .num_outputs = options.num_classes})) {
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
