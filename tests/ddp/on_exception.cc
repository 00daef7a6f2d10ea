// OnExceptionCheckpoint from a user's program, on 1 process and on 2 (DDP over Gloo, the Trainer's own launcher).
//
//   on_exception DEVICES DIR raise|nan|ok
//
// The module's training_step throws (raise) or returns a NaN loss (nan) at global step 3, on every rank; ok trains
// to the end, over a stale DIR/crash/on_exception.ckpt left there first. Rank R writes DIR/result_rank<R>.txt:
//   status <ok|the code of fit's error>
//   message <the first line of fit's error>
//   file <1 when DIR/crash/on_exception.ckpt exists after fit, else 0>
// and rank 0, when the file exists, also:
//   global_step <what the checkpoint holds>
//   optimizer_states <how many it holds>
//   weights <same|differ>: the checkpoint's state_dict against the parameters the module had when its step threw
// tests/ddp/on_exception_test.sh checks them.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "ATen/ATen.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/kiln.h"

namespace {

class Data final : public kiln::DataModule {
 public:
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    at::Generator generator = at::detail::createCPUGenerator(5);
    const at::Tensor inputs = at::randn({64, 6}, generator, at::kFloat);
    const at::Tensor targets = at::randint(0, 3, {64}, generator, at::kLong);
    return std::make_shared<kiln::TensorDataLoader>(inputs, targets, kiln::TensorDataLoaderOptions{.batch_size = 8});
  }
};

class Net final : public kiln::LightningModule {
 public:
  explicit Net(std::string mode) : mode_(std::move(mode)) {
    torch::manual_seed(7);
    body_ = register_module("body", torch::nn::Linear(6, 8));
    head_ = register_module("head", torch::nn::Linear(8, 3));
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = torch::nn::functional::cross_entropy(head_->forward(at::tanh(body_->forward(batch.input))),
                                                           batch.target);
    if (global_step() == 3 && mode_ == "raise") {
      for (const auto& named : named_parameters()) at_throw[named.key()] = named.value().detach().clone();
      throw std::runtime_error("the user's step failed at global step 3");
    }
    if (global_step() == 3 && mode_ == "nan") return loss * std::nan("");
    return loss;
  }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
  std::map<std::string, at::Tensor> at_throw;

 private:
  std::string mode_;
  torch::nn::Linear body_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: on_exception DEVICES DIR raise|nan|ok\n";
    return 2;
  }
  const int devices = std::stoi(argv[1]);
  const std::string dir = argv[2];
  const std::string mode = argv[3];
  const std::string crash = dir + "/crash";
  kiln::Trainer trainer({.accelerator = "cpu",
                         .devices = devices,
                         .strategy = devices > 1 ? "ddp" : "auto",
                         .max_epochs = 2,
                         .default_root_dir = dir,
                         .callbacks = {std::make_shared<kiln::OnExceptionCheckpoint>(
                             kiln::OnExceptionCheckpointOptions{.dirpath = crash})},
                         .logger = false,
                         .enable_checkpointing = false,
                         .enable_progress_bar = false,
                         .enable_model_summary = false});
  if (mode == "ok" && trainer.is_global_zero()) {
    std::filesystem::create_directories(crash);
    std::ofstream(crash + "/on_exception.ckpt") << "a stale file of an earlier crash";
  }
  Net model(mode);
  Data data;
  const absl::Status status = trainer.fit(model, data);
  const std::string path = crash + "/on_exception.ckpt";
  const bool exists = std::filesystem::exists(path);
  std::ofstream out(dir + "/result_rank" + std::to_string(trainer.global_rank()) + ".txt");
  const std::string message(status.message());
  out << "status " << (status.ok() ? "ok" : absl::StatusCodeToString(status.code())) << "\nmessage "
      << message.substr(0, message.find('\n')) << "\nfile " << exists << "\n";
  if (exists && trainer.is_global_zero() && mode != "ok") {
    absl::StatusOr<kiln::Checkpoint> checkpoint = kiln::ReadCheckpoint(path);
    if (!checkpoint.ok()) {
      out << "unreadable " << checkpoint.status() << "\n";
      return 1;
    }
    const auto& top = checkpoint->contents;
    out << "global_step " << top.at("global_step").toInt() << "\noptimizer_states "
        << top.at("optimizer_states").toList().size() << "\n";
    bool same = !model.at_throw.empty();
    for (const auto& [name, tensor] : kiln::CheckpointStateDict(*checkpoint)) {
      const auto found = model.at_throw.find(name);
      same = same && found != model.at_throw.end() && found->second.equal(tensor);
    }
    out << "weights " << (same ? "same" : "differ") << "\n";
  }
  return out.good() ? 0 : 1;
}
