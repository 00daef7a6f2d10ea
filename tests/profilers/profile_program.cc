// A user's program that profiles its fit (TrainerOptions::profiler): a module whose hooks count their own calls,
// trained on 1 or 2 processes (cpu, ddp over Gloo) or on the virtual NPU. Each rank writes what it counted to
// DIR/counts-<global rank>.txt, which tests/profilers/profilers_test.sh compares with the profiler's report.
//
//   profile_program DIR PROFILER DEVICES [ACCELERATOR]
//       (PROFILER simple, advanced or pytorch; the report goes to DIR/prof as fit-perf[-<local rank>].txt. "custom":
//       the program's own profiler object, TallyProfiler below, with the same dirpath and filename.)
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/kiln.h"

namespace {

class Data final : public kiln::DataModule {
 public:
  std::shared_ptr<kiln::DataLoader> train_dataloader() override { return Loader(11, 48); }
  std::vector<std::shared_ptr<kiln::DataLoader>> val_dataloaders() override { return {Loader(12, 24)}; }

 private:
  static std::shared_ptr<kiln::DataLoader> Loader(uint64_t seed, int64_t rows) {
    at::Generator generator = at::detail::createCPUGenerator(seed);
    const at::Tensor inputs = at::randn({rows, 6}, generator, at::kFloat);
    const at::Tensor targets = at::randint(0, 3, {rows}, generator, at::kLong);
    return std::make_shared<kiln::TensorDataLoader>(inputs, targets, kiln::TensorDataLoaderOptions{.batch_size = 4});
  }
};

class ProfiledNet final : public kiln::LightningModule {
 public:
  ProfiledNet() {
    torch::manual_seed(7);
    linear_ = register_module("linear", torch::nn::Linear(6, 3));
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t) override {
    ++training_steps;
    return torch::nn::functional::cross_entropy(linear_->forward(batch.input), batch.target);
  }
  void validation_step(const kiln::Batch& batch, int64_t, int64_t) override {
    ++validation_steps;
    log("val_loss", torch::nn::functional::cross_entropy(linear_->forward(batch.input), batch.target));
  }
  void on_train_epoch_start() override { ++train_epoch_starts; }
  void on_after_backward() override { ++after_backwards; }
  kiln::OptimizerConfig configure_optimizers() override {
    return kiln::OptimizerConfig(std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1)));
  }

  int training_steps = 0;
  int validation_steps = 0;
  int train_epoch_starts = 0;
  int after_backwards = 0;

 private:
  torch::nn::Linear linear_{nullptr};
};

// A profiler of the program's own (TrainerOptions::profiler holds the object): it counts each action's starts and
// the stops that matched the innermost running action; its report, which Profiler::describe writes to its file, is
// one "<calls> <action>" line per action and a line of the stops that did not match.
class TallyProfiler final : public kiln::Profiler {
 public:
  using kiln::Profiler::Profiler;
  void start(absl::string_view action) override {
    running_.emplace_back(action);
    ++calls_[std::string(action)];
  }
  void stop(absl::string_view action) override {
    if (running_.empty() || running_.back() != action) {
      ++unmatched_;
      return;
    }
    running_.pop_back();
  }
  std::string summary() override {
    std::string report = "TALLY " + stage() + "\n";
    for (const auto& [action, calls] : calls_) report += std::to_string(calls) + " " + action + "\n";
    return report + std::to_string(unmatched_ + running_.size()) + " unmatched\n";
  }

 private:
  std::map<std::string, int> calls_;
  std::vector<std::string> running_;
  int unmatched_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: profile_program DIR simple|advanced|pytorch|custom DEVICES [ACCELERATOR]\n";
    return 2;
  }
  const std::string dir = argv[1];
  const int devices = std::stoi(argv[3]);
  ProfiledNet model;
  Data data;
  kiln::TrainerOptions options{.accelerator = argc == 5 ? argv[4] : "cpu",
                               .devices = devices,
                               .strategy = devices > 1 ? "ddp" : "auto",
                               .max_epochs = 2,
                               .default_root_dir = dir,
                               .enable_progress_bar = false,
                               .enable_model_summary = false,
                               .profiler = argv[2],
                               .profiler_dirpath = dir + "/prof",
                               .profiler_filename = "perf"};
  std::shared_ptr<TallyProfiler> tally;
  if (std::string(argv[2]) == "custom") {
    tally = std::make_shared<TallyProfiler>(dir + "/prof", "perf");
    options.profiler = tally;  // The object is the program's: its own dirpath and filename, no options for them.
    options.profiler_dirpath.clear();
    options.profiler_filename.clear();
  }
  kiln::Trainer trainer(options);
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "profile_program: " << status << "\n";
    return 1;
  }
  if (tally != nullptr && trainer.profiler() != tally.get()) {
    std::cerr << "profile_program: the Trainer's profiler is not the program's object\n";
    return 1;
  }
  std::ofstream out(dir + "/counts-" + std::to_string(trainer.global_rank()) + ".txt");
  out << "training_step " << model.training_steps << "\nvalidation_step " << model.validation_steps
      << "\non_train_epoch_start " << model.train_epoch_starts << "\non_after_backward " << model.after_backwards
      << "\nglobal_step " << trainer.global_step() << "\nepochs " << trainer.current_epoch() << "\nclass "
      << "ProfiledNet\nstrategy " << (devices > 1 ? "DDPStrategy" : "SingleDeviceStrategy") << "\n";
  return 0;
}
