// A user's program with ThroughputMonitor, for tests/lightning/throughput_test.sh: the run throughput.py makes in
// the real Lightning (the same sizes, options and logger), on 1 process or on 2 (DDP over Gloo).
//
//   throughput_monitor DIR DEVICES
//   throughput_monitor --compute
//
// Fits an MLP (Linear(8, 16), Tanh, Linear(16, 3)) for 2 epochs on 64 training rows (batches of 8) and 16 validation
// rows (batches of 4) with ThroughputMonitor(length_fn = the input's elements, window_size = 3),
// log_every_n_steps = 2 and a CSVLogger in DIR; then prints, on rank 0, "flops train N" and "flops validate N": the
// FLOPs per batch Kiln counted. --compute prints Kiln's Throughput on the updates `throughput.py compute` gives
// Lightning's, "WORLD KEY VALUE" a line.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "ATen/ATen.h"
#include "glog/logging.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/callbacks/throughput.h"
#include "trainer/callbacks/throughput_monitor.h"
#include "trainer/loggers/csv_logger.h"
#include "trainer/trainer.h"

class Net : public kiln::LightningModule {
 public:
  Net() {
    net_ = register_module("net", torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(),
                                                        torch::nn::Linear(16, 3)));
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = torch::nn::functional::cross_entropy(net_->forward(batch.input), batch.target);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const kiln::Batch& batch, int64_t batch_idx) override {
    log("val_loss", torch::nn::functional::cross_entropy(net_->forward(batch.input), batch.target));
  }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }

 private:
  torch::nn::Sequential net_{nullptr};
};

class Rows : public kiln::DataModule {
 public:
  void setup(kiln::Stage stage) override {
    if (x_.defined()) return;
    x_ = at::randn({80, 8});
    y_ = at::randint(0, 3, {80});
  }
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    return std::make_shared<kiln::TensorDataLoader>(x_.slice(0, 0, 64), y_.slice(0, 0, 64),
                                                    kiln::TensorDataLoaderOptions{.batch_size = 8});
  }
  std::shared_ptr<kiln::DataLoader> val_dataloader() override {
    return std::make_shared<kiln::TensorDataLoader>(x_.slice(0, 64), y_.slice(0, 64),
                                                    kiln::TensorDataLoaderOptions{.batch_size = 4});
  }

 private:
  at::Tensor x_, y_;
};

int main(int argc, char** argv) {
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (argc == 2 && std::string(argv[1]) == "--compute") {
    for (int world : {1, 2}) {
      kiln::Throughput throughput(/*available_flops=*/100, world, /*window_size=*/3);
      const struct {
        double time;
        int64_t batches, samples, lengths;
      } updates[] = {{1.0, 1, 8, 80}, {2.0, 2, 16, 160}, {4.0, 3, 24, 240}};
      for (const auto& u : updates) {
        if (!throughput.Update(u.time, u.batches, u.samples, u.lengths, /*flops=*/10).ok()) return 1;
      }
      for (const auto& [key, value] : throughput.Compute()) std::printf("%d %s %.17g\n", world, key.c_str(), value);
    }
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DIR DEVICES\n", argv[0]);
    return 2;
  }
  torch::manual_seed(0);
  Net model;
  Rows data;
  auto monitor = std::make_shared<kiln::ThroughputMonitor>(kiln::ThroughputMonitorOptions{
      .length_fn = [](const kiln::Batch& batch) { return batch.input.numel(); }, .window_size = 3});
  kiln::Trainer trainer({
      .accelerator = "cpu",
      .devices = argv[2],
      .max_epochs = 2,
      .log_every_n_steps = 2,
      .default_root_dir = argv[1],
      .callbacks = {monitor},
      .loggers = {std::make_shared<kiln::CsvLogger>(kiln::LogDirOptions{.save_dir = argv[1]})},
      .enable_checkpointing = false,
      .enable_progress_bar = false,
      .enable_model_summary = false,
  });
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::fprintf(stderr, "fit: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  if (trainer.is_global_zero()) {
    for (const char* stage : {"train", "validate"}) {
      std::printf("flops %s %.0f\n", stage, monitor->flops_per_batch(stage).value_or(-1));
    }
  }
  return 0;
}
