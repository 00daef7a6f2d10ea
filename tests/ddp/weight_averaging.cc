// A run with StochasticWeightAveraging or EMAWeightAveraging from a user's program, for the tests that compare it
// with Lightning (tests/lightning/weight_averaging_test.sh, whose Lightning side, weight_averaging.py, builds the same
// module, weights and batches), run it on 2 processes (tests/ddp/weight_averaging_ddp_test.sh) and resume it
// (tests/resume/weight_averaging_resume_test.sh).
//
//   weight_averaging swa|ema|none OUT [devices=N] [checkpoints=DIR] [resume=CKPT] [every_n_train_steps=K]
//
// The module: Linear(6, 8), BatchNorm1d(8), tanh, Linear(8, 3) with cross-entropy, each parameter filled with
// 0.5 * sin(1.3 * k + 0.7 * p) (k: its index within the parameter, p: the parameter's index), SGD(lr=0.1,
// momentum=0.9) with StepLR(step_size=2, gamma=0.5) by epoch; 64 rows of 6 inputs (sin(0.37 * i)) and their
// classes (i mod 3) in batches of 8, in order, validated on the first 16 rows each epoch. swa: 6 epochs,
// StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=0.5, annealing_epochs=2); ema: 3 epochs,
// EMAWeightAveraging(decay=0.9). Each rank writes to OUT.rank<R> (OUT itself on rank 0) the module's final
// parameters and buffers, one "name v v ..." line each, in hexadecimal floating point (exact), then "n_averaged N"
// and the global step. checkpoints=DIR saves every epoch (and every K steps with every_n_train_steps); resume=CKPT
// resumes from a checkpoint.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "ATen/ATen.h"
#include "glog/logging.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/batchnorm.h"
#include "torch/nn/modules/linear.h"
#include "trainer/optim/step_lr.h"
#include "torch/optim/sgd.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/callbacks/stochastic_weight_averaging.h"
#include "trainer/callbacks/weight_averaging.h"
#include "trainer/kiln.h"

namespace {

at::Tensor Inputs(int64_t rows) { return at::sin(at::arange(rows * 6, at::kFloat) * 0.37).reshape({rows, 6}); }
at::Tensor Targets(int64_t rows) { return at::arange(rows, at::kLong).remainder(3); }

class Data final : public kiln::DataModule {
 public:
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    return std::make_shared<kiln::TensorDataLoader>(Inputs(64), Targets(64),
                                                    kiln::TensorDataLoaderOptions{.batch_size = 8});
  }
  std::shared_ptr<kiln::DataLoader> val_dataloader() override {
    return std::make_shared<kiln::TensorDataLoader>(Inputs(16), Targets(16),
                                                    kiln::TensorDataLoaderOptions{.batch_size = 8,
                                                                                  .even_shards = false});
  }
};

class Net final : public kiln::LightningModule {
 public:
  Net() {
    first_ = register_module("first", torch::nn::Linear(6, 8));
    norm_ = register_module("norm", torch::nn::BatchNorm1d(8));
    last_ = register_module("last", torch::nn::Linear(8, 3));
    torch::NoGradGuard no_grad;
    int64_t p = 0;
    for (at::Tensor& parameter : parameters()) {
      const at::Tensor k = at::arange(parameter.numel(), at::kFloat);
      parameter.copy_((at::sin(k * 1.3 + 0.7 * static_cast<double>(p)) * 0.5).reshape(parameter.sizes()));
      ++p;
    }
  }
  at::Tensor Forward(const at::Tensor& x) { return last_->forward(at::tanh(norm_->forward(first_->forward(x)))); }
  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = torch::nn::functional::cross_entropy(Forward(batch.input), batch.target);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const kiln::Batch& batch, int64_t batch_idx) override {
    log("val_loss", torch::nn::functional::cross_entropy(Forward(batch.input), batch.target));
  }
  kiln::OptimizerConfig configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    kiln::OptimizerConfig config(sgd);
    config.schedulers.push_back({.scheduler = std::make_shared<kiln::StepLR>(*sgd, 2, 0.5)});
    return config;
  }

 private:
  torch::nn::Linear first_{nullptr}, last_{nullptr};
  torch::nn::BatchNorm1d norm_{nullptr};
};

std::string Arg(int argc, char** argv, const std::string& name, const std::string& fallback = "") {
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(name + "=", 0) == 0) return arg.substr(name.size() + 1);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  const std::string mode = argc >= 3 ? argv[1] : "";
  if (mode != "swa" && mode != "ema" && mode != "none") {
    std::fprintf(stderr, "usage: weight_averaging swa|ema|none OUT [devices=N] [checkpoints=DIR] [resume=CKPT] "
                         "[every_n_train_steps=K]\n");
    return 2;
  }
  const bool swa = std::string(argv[1]) == "swa";
  const std::string out = argv[2];
  const int devices = std::stoi(Arg(argc, argv, "devices", "1"));
  const std::string checkpoints = Arg(argc, argv, "checkpoints");
  std::shared_ptr<kiln::Callback> averaging;
  if (swa) {
    averaging = std::make_shared<kiln::StochasticWeightAveraging>(kiln::StochasticWeightAveragingOptions{
        .swa_lrs = {0.05}, .swa_epoch_start = 0.5, .annealing_epochs = 2});
  } else if (mode == "ema") {
    averaging = std::make_shared<kiln::EMAWeightAveraging>(kiln::EMAWeightAveragingOptions{.decay = 0.9});
  }
  std::vector<std::shared_ptr<kiln::Callback>> callbacks;
  if (averaging != nullptr) callbacks.push_back(averaging);
  if (!checkpoints.empty()) {
    callbacks.push_back(std::make_shared<kiln::ModelCheckpoint>(kiln::ModelCheckpointOptions{
        .dirpath = checkpoints,
        .filename = "{epoch}-{step}",
        .save_top_k = -1,
        .every_n_train_steps = std::stoll(Arg(argc, argv, "every_n_train_steps", "0"))}));
  }
  kiln::Trainer trainer({.accelerator = "cpu",
                         .devices = devices,
                         .strategy = devices > 1 ? "ddp" : "auto",
                         .max_epochs = swa ? 6 : 3,
                         .default_root_dir = checkpoints.empty() ? std::string(".") : checkpoints,
                         .callbacks = callbacks,
                         .logger = false,
                         .enable_checkpointing = !checkpoints.empty(),
                         .enable_progress_bar = false,
                         .enable_model_summary = false});
  Net net;
  Data data;
  if (absl::Status status = trainer.fit(net, data, Arg(argc, argv, "resume")); !status.ok()) {
    std::fprintf(stderr, "fit failed: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  const std::string path = trainer.global_rank() == 0 ? out : out + ".rank" + std::to_string(trainer.global_rank());
  std::ofstream file(path);
  const auto write = [&](const std::string& name, const at::Tensor& tensor) {
    file << name;
    const at::Tensor flat = tensor.detach().to(at::kDouble).flatten().contiguous();
    for (int64_t i = 0; i < flat.numel(); ++i) {
      char text[64];
      std::snprintf(text, sizeof(text), " %a", flat[i].item<double>());
      file << text;
    }
    file << "\n";
  };
  for (const auto& item : net.named_parameters()) write(item.key(), item.value());
  for (const auto& item : net.named_buffers()) write(item.key(), item.value());
  const int64_t n = swa                  ? static_cast<kiln::StochasticWeightAveraging&>(*averaging).n_averaged()
                    : averaging != nullptr ? static_cast<kiln::EMAWeightAveraging&>(*averaging).n_averaged()
                                           : 0;
  file << "n_averaged " << n << "\nglobal_step " << trainer.global_step() << "\n";
  return file.good() ? 0 : 1;
}
