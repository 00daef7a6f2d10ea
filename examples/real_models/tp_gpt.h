// A small GPT written once with Kiln's tensor-parallel layers (trainer/core/tensor_parallel.h): token and position
// embeddings, `layers` blocks of layer norm -> causal self-attention (heads split across the tensor-parallel ranks) ->
// layer norm -> MLP (column-parallel up, row-parallel down), a final layer norm and a head. The layers are built in
// configure_model from device_mesh(): under model_parallel each rank holds its slices; under any other strategy, or
// on one device, they are plain layers. Built from one seed on every rank, its parameters at tp ranks are slices of
// its single-device parameters, so the two runs' losses differ only by the order of floating-point sums.
//
// The data: next-token prediction on fixed pseudo-random sequences over a small vocabulary, where each token is a
// function of the two before it plus noise, so the loss falls as it learns.
#ifndef KILN_EXAMPLES_REAL_MODELS_TP_GPT_H_
#define KILN_EXAMPLES_REAL_MODELS_TP_GPT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "ATen/ATen.h"
#include "torch/nn/functional/activation.h"
#include "torch/nn/modules/embedding.h"
#include "torch/nn/modules/linear.h"
#include "torch/nn/modules/normalization.h"
#include "torch/optim/sgd.h"
#include "trainer/core/data_loader.h"
#include "trainer/core/device_mesh.h"
#include "trainer/core/lightning_module.h"
#include "trainer/core/tensor_parallel.h"

namespace kiln_examples {

struct TpGptConfig {
  int64_t vocab = 32;
  int64_t block = 16;  // Tokens per sequence.
  int64_t dim = 32;
  int64_t heads = 4;
  int64_t layers = 2;
  double lr = 0.3;
};

class TpGptBlock : public torch::nn::Module {
 public:
  TpGptBlock(const TpGptConfig& config, const kiln::ProcessGroupPtr& tp)
      : norm1(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.dim})))),
        attention(register_module("attention", kiln::ParallelSelfAttention(config.dim, config.heads, tp))),
        norm2(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.dim})))),
        up(register_module("up", kiln::ColumnParallelLinear(
                                     kiln::ColumnParallelLinearOptions(config.dim, 4 * config.dim), tp))),
        down(register_module("down", kiln::RowParallelLinear(
                                         kiln::RowParallelLinearOptions(4 * config.dim, config.dim), tp))) {}

  at::Tensor forward(at::Tensor x) {
    x = x + attention(norm1(x));
    return x + down(torch::nn::functional::gelu(up(norm2(x))));
  }

  torch::nn::LayerNorm norm1{nullptr};
  kiln::ParallelSelfAttention attention{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
  kiln::ColumnParallelLinear up{nullptr};
  kiln::RowParallelLinear down{nullptr};
};

class TpGpt : public kiln::LightningModule {
 public:
  explicit TpGpt(TpGptConfig config = {}) : config_(config) {}

  // Idempotent, as Lightning asks: built once, at the first entry point.
  void configure_model() override {
    if (built_) return;
    built_ = true;
    const std::shared_ptr<const kiln::DeviceMesh> mesh = device_mesh();
    const kiln::ProcessGroupPtr tp = mesh != nullptr ? mesh->tensor_parallel_group() : nullptr;
    tokens_ = register_module("tokens", torch::nn::Embedding(config_.vocab, config_.dim));
    positions_ = register_module("positions", torch::nn::Embedding(config_.block, config_.dim));
    for (int64_t i = 0; i < config_.layers; ++i) {
      blocks_.push_back(register_module("block" + std::to_string(i), std::make_shared<TpGptBlock>(config_, tp)));
    }
    norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config_.dim})));
    // The head's logits are gathered, so the loss is the whole vocabulary's on every rank.
    head_ = register_module("head", kiln::ColumnParallelLinear(
                                        kiln::ColumnParallelLinearOptions(config_.dim, config_.vocab).gather_output(true),
                                        tp));
  }

  at::Tensor forward(const at::Tensor& ids) {
    const at::Tensor where = at::arange(ids.size(1), ids.options());
    at::Tensor x = tokens_(ids) + positions_(where);
    for (const auto& block : blocks_) x = block->forward(x);
    return head_(norm_(x));
  }

  at::Tensor training_step(const kiln::Batch& batch, int64_t) override {
    const at::Tensor logits = forward(batch.input);
    const at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, config_.vocab}), batch.target.reshape({-1}));
    log("train_loss", loss, {.prog_bar = true});
    return loss;
  }

  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(config_.lr).momentum(0.9));
  }

 private:
  TpGptConfig config_;
  bool built_ = false;
  torch::nn::Embedding tokens_{nullptr};
  torch::nn::Embedding positions_{nullptr};
  std::vector<std::shared_ptr<TpGptBlock>> blocks_;
  torch::nn::LayerNorm norm_{nullptr};
  kiln::ColumnParallelLinear head_{nullptr};
};

// `sequences` sequences of block + 1 tokens: inputs the first block, targets the next token at each place.
class TpGptData : public kiln::DataModule {
 public:
  TpGptData(TpGptConfig config, int64_t sequences, int64_t batch_size)
      : config_(config), sequences_(sequences), batch_size_(batch_size) {}
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    at::Generator generator = at::detail::createCPUGenerator(1234);
    at::Tensor tokens = at::empty({sequences_, config_.block + 1}, at::kLong);
    const at::Tensor noise = at::randint(0, 4, {sequences_, config_.block + 1}, generator, at::kLong);
    tokens.select(1, 0).copy_(at::randint(0, config_.vocab, {sequences_}, generator, at::kLong));
    tokens.select(1, 1).copy_(at::randint(0, config_.vocab, {sequences_}, generator, at::kLong));
    for (int64_t t = 2; t <= config_.block; ++t) {
      tokens.select(1, t).copy_((tokens.select(1, t - 1) * 3 + tokens.select(1, t - 2) + noise.select(1, t)) %
                                config_.vocab);
    }
    return std::make_shared<kiln::TensorDataLoader>(tokens.narrow(1, 0, config_.block).contiguous(),
                                                    tokens.narrow(1, 1, config_.block).contiguous(),
                                                    kiln::TensorDataLoaderOptions{.batch_size = batch_size_});
  }

 private:
  TpGptConfig config_;
  int64_t sequences_;
  int64_t batch_size_;
};

}  // namespace kiln_examples

#endif  // KILN_EXAMPLES_REAL_MODELS_TP_GPT_H_
