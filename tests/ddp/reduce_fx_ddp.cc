// reduce_fx with sync_dist across 2 real processes (c10d over Gloo), on two validation loaders: values logged with
// kSum, kMax, kMin and kMean, on the epoch and on the step, are checked on every rank, under each loader's name
// (val.../dataloader_idx_<i>), against the same statistics of the whole validation set, computed here from the data
// itself. Exits 1, saying what differs, when one is off.
//
//   reduce_fx_ddp DIR
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/kiln.h"

namespace {

// Ten examples of one feature; with 2 processes each takes every other one (rank r: r, r + 2, ...).
at::Tensor Values() {
  return at::tensor({3.0f, -1.0f, 7.0f, 2.0f, 5.0f, 11.0f, -4.0f, 6.0f, 0.0f, 9.0f}).reshape({10, 1});
}

class Data final : public kiln::DataModule {
 public:
  std::shared_ptr<kiln::DataLoader> train_dataloader() override { return Loader(true); }
  // Two validation loaders (the same rows): each one's metrics are reduced apart, named after it.
  std::vector<std::shared_ptr<kiln::DataLoader>> val_dataloaders() override { return {Loader(false), Loader(false)}; }

 private:
  static std::shared_ptr<kiln::DataLoader> Loader(bool training) {
    return std::make_shared<kiln::TensorDataLoader>(Values(), Values().squeeze(1),
                                                    kiln::TensorDataLoaderOptions{.batch_size = 2,
                                                                                  .even_shards = training});
  }
};

class Logging final : public kiln::LightningModule {
 public:
  Logging() { layer_ = register_module("layer", torch::nn::Linear(1, 1)); }
  at::Tensor training_step(const kiln::Batch& batch, int64_t) override {
    return (layer_->forward(batch.input).squeeze(1) - batch.target).pow(2).mean();
  }
  void validation_step(const kiln::Batch& batch, int64_t) override {
    const at::Tensor x = batch.input;
    log("v_sum", x.sum(), {.sync_dist = true, .reduce_fx = kiln::Reduce::kSum});
    log("v_max", x.max(), {.sync_dist = true, .reduce_fx = kiln::Reduce::kMax});
    log("v_min", x.min(), {.sync_dist = true, .reduce_fx = kiln::Reduce::kMin});
    log("v_mean", x.mean(), {.sync_dist = true});
    log("s_max", x.max(), {.on_step = true, .on_epoch = false, .sync_dist = true, .reduce_fx = kiln::Reduce::kMax});
  }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01));
  }

 private:
  torch::nn::Linear layer_{nullptr};
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: reduce_fx_ddp DIR\n";
    return 2;
  }
  Logging model;
  Data data;
  kiln::Trainer trainer({.accelerator = "cpu",
                         .devices = 2,
                         .strategy = "ddp",
                         .max_epochs = 1,
                         .num_sanity_val_steps = 0,
                         .default_root_dir = argv[1],
                         .logger = false,
                         .enable_checkpointing = false,
                         .enable_progress_bar = false,
                         .enable_model_summary = false});
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "reduce_fx_ddp: " << status << "\n";
    return 1;
  }
  const at::Tensor x = Values().squeeze(1).to(at::kDouble);
  // Each rank's last validation batch is its last example alone (5 examples in batches of 2): examples 8 and 9.
  std::map<std::string, double> expected;
  for (const char* loader : {"/dataloader_idx_0", "/dataloader_idx_1"}) {
    const std::string suffix = loader;
    expected["v_sum" + suffix] = x.sum().item<double>();
    expected["v_max" + suffix] = x.max().item<double>();
    expected["v_min" + suffix] = x.min().item<double>();
    expected["v_mean" + suffix] = x.mean().item<double>();
    expected["s_max" + suffix] = std::max(x[8].item<double>(), x[9].item<double>());
  }
  int failures = 0;
  for (const auto& [name, want] : expected) {
    const auto found = trainer.callback_metrics().find(name);
    const double got = found != trainer.callback_metrics().end() ? found->second : NAN;
    if (!(std::abs(got - want) <= 1e-6 * std::max(1.0, std::abs(want)))) {
      std::cerr << "rank " << trainer.global_rank() << ": " << name << " = " << got << ", the whole data's is "
                << want << "\n";
      ++failures;
    }
  }
  if (failures == 0 && trainer.is_global_zero()) {
    std::cout << "PASS: sum, max, min, mean and a step max agree on every rank, for each of two loaders\n";
  }
  return failures == 0 ? 0 : 1;
}
