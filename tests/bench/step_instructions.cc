// Instructions per training step, the repeatable second figure for the tiny MLP (32 -> 64 -> 1, batch 64, MSE,
// SGD): run under callgrind by tools/bench_instructions.sh, which subtracts a short run from a long one so that
// start-up cancels out.
//   step_instructions raw N               the hand-written LibTorch loop (torch::optim), N steps
//   step_instructions fused_raw N         the fused hand-written loop: LibTorch's fused kernel called directly
//                                         (fused_loop.h), the fastest this step can be; also fused_raw_medium and
//                                         fused_raw_many
//   step_instructions kiln N              Trainer::fit over the same N batches (callbacks off)
//   step_instructions kiln_metrics N M    the same, with a CSV logger (a row every 50 steps, Lightning's default)
//                                         and M metrics logged in each training_step (M = 0 is the baseline);
//                                         a fourth argument says how they are named: made (once, the default),
//                                         literal, built (in each call), or built_unlogged (the same names built in
//                                         each call but not logged: the program's own cost of building them)
//   step_instructions kiln_checkpoint N K Trainer::fit with a ModelCheckpoint saving every K steps (keeping the
//                                         newest, Kiln's default); K = 0 is the same run with checkpointing off
//   step_instructions kiln_fused N        the tiny MLP under Trainer::fit with kiln::FusedSGD (LibTorch's fused
//                                         kernels), callbacks off
//   step_instructions raw_medium N        the hand-written loop on 784 -> 512 -> 256 -> 10, batch 128, Adam
//   step_instructions kiln_medium N       Trainer::fit on it with kiln::FusedAdam, callbacks off
//   step_instructions raw_many N          the hand-written loop on 256 -> 24 x 256 -> 10, batch 32, Adam
//   step_instructions kiln_many N         Trainer::fit on it with kiln::FusedAdam, callbacks off
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/Parallel.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "torch/optim/sgd.h"
#include "tests/bench/fused_loop.h"
#include "torch/utils.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/loggers/csv_logger.h"
#include "trainer/optim/fused_optimizers.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

torch::nn::Sequential Net() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(32, 64), torch::nn::ReLU(), torch::nn::Linear(64, 1));
}

// The classifiers: input width, hidden widths, 10 classes; Adam.
torch::nn::Sequential Classifier(const std::vector<int64_t>& widths) {
  torch::manual_seed(0);
  torch::nn::Sequential net;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    net->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
    net->push_back(torch::nn::ReLU());
  }
  net->push_back(torch::nn::Linear(widths.back(), 10));
  return net;
}

const std::vector<int64_t> kMedium = {784, 512, 256};
const std::vector<int64_t> kMany(25, 256);

class Loader final : public DataLoader {
 public:
  explicit Loader(const std::vector<Batch>* batches) : batches_(batches) {}
  int64_t num_batches() const override { return static_cast<int64_t>(batches_->size()); }
  Batch get_batch(int64_t index) override { return (*batches_)[index]; }

 private:
  const std::vector<Batch>* batches_;
};

class Data final : public DataModule {
 public:
  explicit Data(const std::vector<Batch>* batches) : loader_(std::make_shared<Loader>(batches)) {}
  std::shared_ptr<DataLoader> train_dataloader() override { return loader_; }

 private:
  std::shared_ptr<Loader> loader_;
};

class Module final : public LightningModule {
 public:
  // `names`: how training_step names its metrics: made once ("made"), made in each call as the README's example
  // does (`stage + "_loss"`: "built"), or string literals ("literal": 50 of them written out; another count passes
  // each name as a const char*); "built_unlogged" builds them in each call and
  // logs nothing, the baseline that tells the program's cost of building names from Kiln's cost of logging them.
  explicit Module(int metrics = 0, bool fused = false, std::string names = "made")
      : net_(Net()), fused_(fused), naming_(std::move(names)) {
    register_module("net", net_);
    for (int i = 0; i < metrics; ++i) names_.push_back("metric_" + std::to_string(i));
  }
  // A classifier of `widths` (with Adam), instead of the tiny MLP.
  explicit Module(const std::vector<int64_t>& widths) : net_(Classifier(widths)), fused_(true), classifier_(true) {
    register_module("net", net_);
  }
  at::Tensor training_step(const Batch& batch, int64_t) override {
    const at::Tensor output = net_->forward(batch.input);
    at::Tensor loss = classifier_ ? torch::nn::functional::cross_entropy(output, batch.target)
                                  : torch::nn::functional::mse_loss(output, batch.target);
    if (naming_ == "built") {
      for (size_t i = 0; i < names_.size(); ++i) log("metric_" + std::to_string(i), loss);
    } else if (naming_ == "built_unlogged") {
      for (size_t i = 0; i < names_.size(); ++i) {
        const std::string name = "metric_" + std::to_string(i);
        asm volatile("" : : "r"(name.data()) : "memory");  // Made, as if something read it.
      }
    } else if (naming_ == "literal" && names_.size() == 50) {
      // String literals, as a program writes them: their lengths are known where they are compiled.
#define KILN_LOG_TEN(prefix)                                                                                   \
  log(prefix "0", loss), log(prefix "1", loss), log(prefix "2", loss), log(prefix "3", loss), log(prefix "4", loss), \
      log(prefix "5", loss), log(prefix "6", loss), log(prefix "7", loss), log(prefix "8", loss), log(prefix "9", loss)
      KILN_LOG_TEN("metric_");
      KILN_LOG_TEN("metric_1");
      KILN_LOG_TEN("metric_2");
      KILN_LOG_TEN("metric_3");
      KILN_LOG_TEN("metric_4");
#undef KILN_LOG_TEN
    } else if (naming_ == "literal") {
      for (const std::string& name : names_) log(name.c_str(), loss);  // Another count: each a const char*.
    } else {
      for (const std::string& name : names_) log(name, loss);
    }
    return loss;
  }
  OptimizerConfig configure_optimizers() override {
    if (classifier_) return std::make_shared<FusedAdam>(parameters(), torch::optim::AdamOptions(1e-3));
    if (fused_) return std::make_shared<FusedSGD>(parameters(), torch::optim::SGDOptions(1e-2));
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(1e-2));
  }

 private:
  torch::nn::Sequential net_;
  bool fused_ = false;
  bool classifier_ = false;
  std::vector<std::string> names_;  // Made once: what is counted is logging, not building names.
  std::string naming_;
};

// One epoch of Trainer::fit over `data` on the CPU, without sanity checks or progress bar; `options` gives the rest.
int Fit(LightningModule& module, DataModule& data, TrainerOptions options) {
  options.accelerator = "cpu";
  options.devices = 1;
  options.max_epochs = 1;
  options.num_sanity_val_steps = 0;
  options.enable_progress_bar = false;
  if (options.default_root_dir == ".") options.default_root_dir = "/tmp";
  Trainer trainer(options);
  return trainer.fit(module, data).ok() ? 0 : 1;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  const bool metrics_mode = (argc == 4 || argc == 5) && std::strcmp(argv[1], "kiln_metrics") == 0;
  const bool checkpoint_mode = argc == 4 && std::strcmp(argv[1], "kiln_checkpoint") == 0;
  const std::string mode = argc >= 2 ? argv[1] : "";
  const bool two_args = mode == "raw" || mode == "fused_raw" || mode == "kiln" || mode == "kiln_fused" ||
                        mode == "raw_medium" || mode == "fused_raw_medium" || mode == "kiln_medium" ||
                        mode == "raw_many" || mode == "fused_raw_many" || mode == "kiln_many";
  if (!metrics_mode && !checkpoint_mode && (argc != 3 || !two_args)) {
    std::fprintf(stderr,
                 "usage: %s [fused_]raw|kiln|kiln_fused|[fused_]raw_medium|kiln_medium|[fused_]raw_many|kiln_many "
                 "STEPS | kiln_metrics STEPS METRICS | kiln_checkpoint STEPS EVERY\n",
                 argv[0]);
    return 2;
  }
  at::set_num_threads(1);
  const int64_t steps = std::atoll(argv[2]);
  if (mode.find("medium") != std::string::npos || mode.find("many") != std::string::npos) {
    const bool medium = mode.find("medium") != std::string::npos;
    const std::vector<int64_t>& widths = medium ? kiln::kMedium : kiln::kMany;
    const int64_t batch_size = medium ? 128 : 32;
    std::vector<kiln::Batch> classified;
    for (int64_t i = 0; i < steps; ++i) {
      classified.push_back({at::randn({batch_size, widths.front()}), at::randint(10, {batch_size}, at::kLong)});
    }
    if (mode.rfind("fused_raw", 0) == 0) {
      torch::nn::Sequential net = kiln::Classifier(widths);
      kiln::bench::FusedHandWrittenStep optimizer(net->parameters(), /*adam=*/true);
      for (const kiln::Batch& batch : classified) {
        optimizer.ZeroGrad();
        torch::nn::functional::cross_entropy(net->forward(batch.input), batch.target).backward();
        optimizer.Step();
      }
      return 0;
    }
    if (mode.rfind("raw", 0) == 0) {
      torch::nn::Sequential net = kiln::Classifier(widths);
      torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));
      for (const kiln::Batch& batch : classified) {
        adam.zero_grad();
        torch::nn::functional::cross_entropy(net->forward(batch.input), batch.target).backward();
        adam.step();
      }
      return 0;
    }
    kiln::Module module(widths);
    kiln::Data data(&classified);
    return kiln::Fit(module, data, {.enable_checkpointing = false});
  }
  std::vector<kiln::Batch> batches;
  for (int64_t i = 0; i < steps; ++i) batches.push_back({at::randn({64, 32}), at::randn({64, 1})});
  if (std::strcmp(argv[1], "raw") == 0) {
    torch::nn::Sequential net = kiln::Net();
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(1e-2));
    for (const kiln::Batch& batch : batches) {
      sgd.zero_grad();
      torch::nn::functional::mse_loss(net->forward(batch.input), batch.target).backward();
      sgd.step();
    }
    return 0;
  }
  if (mode == "fused_raw") {
    torch::nn::Sequential net = kiln::Net();
    kiln::bench::FusedHandWrittenStep optimizer(net->parameters(), /*adam=*/false);
    for (const kiln::Batch& batch : batches) {
      optimizer.ZeroGrad();
      torch::nn::functional::mse_loss(net->forward(batch.input), batch.target).backward();
      optimizer.Step();
    }
    return 0;
  }
  kiln::Data data(&batches);
  if (metrics_mode) {
    kiln::Module module(std::atoi(argv[3]), false, argc == 5 ? argv[4] : "made");
    char folder[] = "/tmp/kiln-step-instructions-XXXXXX";
    if (mkdtemp(folder) == nullptr) return 1;
    const int status =
        kiln::Fit(module, data,
                  {.default_root_dir = folder,
                   .loggers = {std::make_shared<kiln::CsvLogger>(kiln::LogDirOptions{.save_dir = folder})},
                   .enable_checkpointing = false});
    std::filesystem::remove_all(folder);
    return status;
  }
  if (checkpoint_mode) {
    kiln::Module module;
    const int64_t every = std::atoll(argv[3]);
    char folder[] = "/tmp/kiln-step-instructions-XXXXXX";
    if (mkdtemp(folder) == nullptr) return 1;
    std::vector<std::shared_ptr<kiln::Callback>> callbacks;
    if (every > 0) {
      callbacks.push_back(std::make_shared<kiln::ModelCheckpoint>(
          kiln::ModelCheckpointOptions{.dirpath = folder, .every_n_train_steps = every}));
    }
    const int status = kiln::Fit(
        module, data,
        {.default_root_dir = folder, .callbacks = callbacks, .logger = false, .enable_checkpointing = every > 0});
    std::filesystem::remove_all(folder);
    return status;
  }
  kiln::Module module(0, /*fused=*/mode == "kiln_fused");
  return kiln::Fit(module, data, {.enable_checkpointing = false});
}
