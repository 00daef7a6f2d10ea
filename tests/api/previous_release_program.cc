// A user program written against the previous release's README (Kiln of 2026-12-01), compiled and run unchanged:
// the headers it includes have moved since (trainer/data_loader.h, trainer/lightning_module.h, trainer/callback.h,
// trainer/models/model_summary_callback.h), and its callback overrides the on_train_batch_end of that release,
// without `outputs`. It must build (with deprecation warnings at most) and train as it did: the forwarding headers
// and the deprecated overload are Kiln's promise (docs/library.md, "The public API"; CHANGELOG.md). Do not modernise
// this file: it is the old program, on purpose.
#include <cstdio>
#include <iostream>
#include <memory>

#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "trainer/callback.h"
#include "trainer/callbacks/early_stopping.h"
#include "trainer/data_loader.h"
#include "trainer/lightning_module.h"
#include "trainer/models/model_summary_callback.h"
#include "trainer/trainer.h"

// The README's "Writing a model" example, as it stood.
class Classifier : public kiln::LightningModule {
 public:
  Classifier() { net_ = register_module("net", torch::nn::Linear(16, 4)); }
  at::Tensor training_step(const kiln::Batch& batch, int64_t) override {
    at::Tensor loss = torch::nn::functional::cross_entropy(net_->forward(batch.input), batch.target);
    log("train_loss", loss, {.prog_bar = true});
    return loss;
  }
  void validation_step(const kiln::Batch& batch, int64_t) override {
    log("val_loss", torch::nn::functional::cross_entropy(net_->forward(batch.input), batch.target));
  }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-3));
  }
  torch::nn::Linear net_{nullptr};
};

// Data as the README's target table pointed to it: TensorDataLoader from trainer/data_loader.h.
class Data : public kiln::DataModule {
 public:
  Data() {
    torch::manual_seed(0);
    inputs_ = torch::randn({256, 16});
    targets_ = inputs_.slice(1, 0, 4).argmax(1);
  }
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    return std::make_shared<kiln::TensorDataLoader>(inputs_, targets_, kiln::TensorDataLoaderOptions{.batch_size = 32});
  }
  std::shared_ptr<kiln::DataLoader> val_dataloader() override {
    return std::make_shared<kiln::TensorDataLoader>(inputs_, targets_, kiln::TensorDataLoaderOptions{.batch_size = 64});
  }

 private:
  at::Tensor inputs_;
  at::Tensor targets_;
};

// A callback of that release: on_train_batch_end without the step's loss.
class CountBatches : public kiln::Callback {
 public:
  std::string state_key() const override { return "CountBatches"; }
  void on_train_batch_end(kiln::Trainer& trainer, kiln::LightningModule& module, const kiln::Batch& batch,
                          int64_t batch_idx) override {
    ++batches;
  }
  int batches = 0;
};

int main() {
  Data data;
  Classifier model;
  auto count = std::make_shared<CountBatches>();
  kiln::Trainer trainer({.accelerator = "cpu",
                         .max_epochs = 3,
                         .callbacks = {count, std::make_shared<kiln::ModelSummaryCallback>(),
                                       std::make_shared<kiln::EarlyStopping>(
                                           kiln::EarlyStoppingOptions{.monitor = "val_loss"})},
                         .logger = false,
                         .enable_checkpointing = false,
                         .enable_progress_bar = false});
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "error: " << status << "\n";
    return 1;
  }
  // 256 examples in batches of 32, three epochs: the old-form callback saw every batch.
  std::printf("callback saw %d batches; val_loss %.4f\n", count->batches, trainer.callback_metrics().at("val_loss"));
  if (count->batches != 3 * 256 / 32) {
    std::cerr << "error: the callback of the previous release saw " << count->batches << " batches, not 24\n";
    return 1;
  }
  return 0;
}
