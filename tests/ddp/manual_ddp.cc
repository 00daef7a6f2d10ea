// Manual optimization under DDP with 2 real processes (the Trainer's own launcher, c10d over Gloo): a module that
// steps by hand (manual_backward, optimizers()[0].step(), lr_schedulers()[0].step()) and the same module under
// automatic optimization. Each rank writes its final parameters and learning rate, in hexadecimal floating point,
// to DIR/<mode>_rank<R>.txt; tests/ddp/manual_ddp_test.sh compares them. The _accumulate modes accumulate the
// gradients of 2 batches per step: the automatic one with accumulate_grad_batches=2, the manual one as Lightning's
// docs do it under DDP (the window's first backward inside toggle_model(sync_grad=false), which keeps each rank's
// gradients local, the last one synced); the manual one also writes the sum of its local gradients after each
// unsynced backward ("local_grad"), which must differ between the ranks.
//
//   manual_ddp manual|automatic|manual_accumulate|automatic_accumulate DIR [STRATEGY]
//       (STRATEGY: ddp, the default, or fsdp: the same module sharded)
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "ATen/ATen.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "torch/optim/schedulers/step_lr.h"
#include "trainer/kiln.h"

namespace {

class Data final : public kiln::DataModule {
 public:
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    at::Generator generator = at::detail::createCPUGenerator(11);
    const at::Tensor inputs = at::randn({64, 6}, generator, at::kFloat);
    const at::Tensor targets = at::randint(0, 3, {64}, generator, at::kLong);
    return std::make_shared<kiln::TensorDataLoader>(inputs, targets, kiln::TensorDataLoaderOptions{.batch_size = 8});
  }
};

class Net final : public kiln::LightningModule {
 public:
  Net(bool automatic, bool accumulate) : accumulate_(accumulate) {
    torch::manual_seed(7);
    body_ = register_module("body", torch::nn::Linear(6, 8));
    head_ = register_module("head", torch::nn::Linear(8, 3));
    set_automatic_optimization(automatic);
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = torch::nn::functional::cross_entropy(head_->forward(at::tanh(body_->forward(batch.input))),
                                                           batch.target);
    if (automatic_optimization()) return loss;
    kiln::LightningOptimizer optimizer = optimizers()[0];
    if (accumulate_) {
      const bool last_of_window = batch_idx % 2 == 1;
      {
        kiln::ToggledModel toggled = optimizer.toggle_model(/*sync_grad=*/last_of_window);
        manual_backward(loss / 2);
      }
      if (!last_of_window) {
        double sum = 0;
        for (const at::Tensor& parameter : parameters()) {
          if (parameter.grad().defined()) sum += parameter.grad().sum().item<double>();  // fsdp: in its shards
        }
        local_grads.push_back(sum);
        return loss;
      }
      optimizer.step();
      optimizer.zero_grad();
      lr_schedulers()[0].step();
      return loss;
    }
    optimizer.zero_grad();
    manual_backward(loss);
    optimizer.step();
    lr_schedulers()[0].step();
    return loss;
  }
  kiln::OptimizerConfig configure_optimizers() override {
    auto adam = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
    kiln::OptimizerConfig config(adam);
    config.schedulers.push_back({.scheduler = std::make_shared<torch::optim::StepLR>(*adam, 3, 0.5),
                                 .interval = kiln::SchedulerConfig::Interval::kStep});
    return config;
  }

  std::vector<double> local_grads;  // The gradients' sum after each unsynced backward (_accumulate).

 private:
  bool accumulate_;
  torch::nn::Linear body_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc >= 3 ? argv[1] : "";
  if ((argc != 3 && argc != 4) || (mode != "manual" && mode != "automatic" && mode != "manual_accumulate" &&
                                   mode != "automatic_accumulate")) {
    std::cerr << "usage: manual_ddp manual|automatic|manual_accumulate|automatic_accumulate DIR [STRATEGY]\n";
    return 2;
  }
  const std::string strategy = argc == 4 ? argv[3] : "ddp";
  const bool accumulate = mode == "manual_accumulate" || mode == "automatic_accumulate";
  Net model(mode == "automatic" || mode == "automatic_accumulate", accumulate);
  Data data;
  kiln::Trainer trainer({.accelerator = "cpu",
                         .devices = 2,
                         .strategy = strategy,
                         .max_epochs = 2,
                         .accumulate_grad_batches = mode == "automatic_accumulate" ? 2 : 1,
                         .default_root_dir = argv[2],
                         .logger = false,
                         .enable_checkpointing = false,
                         .enable_progress_bar = false,
                         .enable_model_summary = false});
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "manual_ddp " << mode << ": " << status << "\n";
    return 1;
  }
  std::ofstream out(std::string(argv[2]) + "/" + mode + "_rank" + std::to_string(trainer.global_rank()) + ".txt");
  out << std::hexfloat << "global_step " << trainer.global_step() << "\nlr "
      << trainer.optimizers()[0]->param_groups()[0].options().get_lr() << "\n";
  for (const at::Tensor& parameter : model.parameters()) {
    const at::Tensor flat = parameter.detach().flatten().contiguous();
    for (int64_t i = 0; i < flat.numel(); ++i) out << flat[i].item<float>() << "\n";
  }
  for (double sum : model.local_grads) out << "local_grad " << sum << "\n";
  return out.good() ? 0 : 1;
}
