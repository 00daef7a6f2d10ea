// A user's program that builds its model in configure_model on the meta device (kiln::MetaDeviceScope) or normally,
// and trains it, for tests/fsdp/meta_init_test.sh. Each rank writes OUT.rank<R>.txt: every step's loss and the final
// parameters (in hexadecimal floating point, so that two runs compare bit for bit), and what the process's memory
// did while the Trainer set the model up:
//
//   meta_init OUT [meta=1|0] [accelerator=cpu|virtual_npu] [strategy=fsdp|ddp|single_device] [devices=N]
//                 [width=W depth=D] [batches=B] [params=1|0 (write the final parameters)]
//                 [where=configure_model|init_module (built in main, under Trainer::init_module(meta))]
//
// The model: Linear(6, W), then D - 1 times Tanh and Linear(W, W), a LayerNorm(W) and a head Linear(W, 3), drawn
// from seed 7 at the start of configure_model; under fsdp every Linear is a unit (the LayerNorm is the root's).
//
// Memory (the lines "rss_growth_bytes", "model_bytes", "shard_bytes", "largest_unit_bytes"): configure_model resets
// the process's peak resident memory (VmHWM, through /proc/self/clear_refs) and notes its resident memory before it
// builds; on_train_start, after the strategy's setup, reads the peak. Their difference is what building and setting
// the model up took at its highest.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/module.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/nn/modules/normalization.h"
#include "torch/optim/sgd.h"
#include "torch/utils.h"
#include "trainer/core/meta_device.h"
#include "trainer/kiln.h"
#include "trainer/strategies/fsdp_strategy.h"

namespace {

// A field of /proc/self/status ("VmRSS", "VmHWM"), in bytes; -1 where it cannot be read.
int64_t ProcStatus(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::strtoll(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
  }
  return -1;
}

class Data final : public kiln::DataModule {
 public:
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    at::Generator generator = at::detail::createCPUGenerator(11);
    const at::Tensor inputs = at::randn({128, 6}, generator, at::kFloat);
    const at::Tensor targets = at::randint(0, 3, {128}, generator, at::kLong);
    return std::make_shared<kiln::TensorDataLoader>(inputs, targets, kiln::TensorDataLoaderOptions{.batch_size = 8});
  }
};

class Net final : public kiln::LightningModule {
 public:
  Net(bool meta, int64_t width, int64_t depth) : meta_(meta), width_(width), depth_(depth) {}

  void configure_model() override {
    if (!built_) Build();
  }
  // From configure_model, or from main under Trainer::init_module (where=init_module).
  void Build() {
    built_ = true;
    std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS (Linux 4.0 and later).
    baseline_ = ProcStatus("VmRSS");
    torch::manual_seed(7);
    std::optional<kiln::MetaDeviceScope> scope;
    if (meta_ && !kiln::MetaDeviceScope::active()) scope.emplace();
    torch::nn::Sequential blocks;
    blocks->push_back(torch::nn::Linear(6, width_));
    for (int64_t i = 1; i < depth_; ++i) {
      blocks->push_back(torch::nn::Tanh());
      blocks->push_back(torch::nn::Linear(width_, width_));
    }
    blocks->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({width_})));
    blocks_ = register_module("blocks", blocks);
    head_ = register_module("head", torch::nn::Linear(width_, 3));
    for (const at::Tensor& parameter : parameters()) {
      misplaced = misplaced || parameter.is_meta() != meta_;
    }
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t) override {
    at::Tensor loss = torch::nn::functional::cross_entropy(head_->forward(blocks_->forward(batch.input)), batch.target);
    losses.push_back(loss.item<float>());
    return loss;
  }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  void on_train_start() override { peak = ProcStatus("VmHWM"); }

  int64_t baseline() const { return baseline_; }
  int64_t width() const { return width_; }
  std::vector<float> losses;
  int64_t peak = -1;
  bool misplaced = false;  // A parameter not on the meta device under the scope, or on it without.

 private:
  bool meta_;
  bool built_ = false;
  int64_t width_, depth_;
  int64_t baseline_ = -1;
  torch::nn::Sequential blocks_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: meta_init OUT [key=value...]\n";
    return 2;
  }
  std::map<std::string, std::string> args = {{"meta", "1"},    {"accelerator", "cpu"}, {"strategy", "fsdp"},
                                             {"devices", "2"}, {"width", "13"},        {"depth", "3"},
                                             {"batches", "4"}, {"params", "1"}, {"where", "configure_model"}};
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t equals = arg.find('=');
    if (equals == std::string::npos || args.count(arg.substr(0, equals)) == 0) {
      std::cerr << "meta_init: unknown argument '" << arg << "'\n";
      return 2;
    }
    args[arg.substr(0, equals)] = arg.substr(equals + 1);
  }
  kiln::TrainerOptions options{.accelerator = args["accelerator"],
                               .devices = args["devices"],
                               .strategy = args["strategy"],
                               .max_epochs = 1,
                               .logger = false,
                               .enable_checkpointing = false,
                               .enable_progress_bar = false,
                               .enable_model_summary = false};
  options.limit_train_batches = static_cast<int64_t>(std::stoll(args["batches"]));
  if (args["strategy"] == "fsdp") {
    kiln::FSDPOptions fsdp;
    fsdp.auto_wrap_policy.module_types = {"Linear"};
    options.strategy = std::make_shared<kiln::FSDPStrategy>(fsdp);
  }
  Net model(args["meta"] == "1", std::stoll(args["width"]), std::stoll(args["depth"]));
  Data data;
  kiln::Trainer trainer(options);
  if (args["where"] == "init_module") {
    std::unique_ptr<kiln::MetaDeviceScope> scope = trainer.init_module(args["meta"] == "1");
    model.Build();
  }
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "meta_init: " << status << "\n";
    return 1;
  }
  if (model.misplaced) {
    std::cerr << "meta_init: configure_model built a parameter " << (args["meta"] == "1" ? "off" : "on")
              << " the meta device\n";
    return 1;
  }
  std::ofstream out(std::string(argv[1]) + ".rank" + std::to_string(trainer.local_rank()) + ".txt");
  out << std::hexfloat;
  for (size_t step = 0; step < model.losses.size(); ++step) out << "loss " << step << " " << model.losses[step] << "\n";
  if (args["params"] == "1") {
    for (const auto& item : model.named_parameters()) {
      const at::Tensor flat = item.value().detach().flatten().contiguous().cpu();
      out << item.key();
      for (int64_t i = 0; i < flat.numel(); ++i) out << " " << flat[i].item<float>();
      out << "\n";
    }
  }
  // Float32 parameters: the model's bytes, a rank's shard of them, and the largest unit (a Linear(W, W)).
  int64_t numel = 0;
  for (const at::Tensor& parameter : model.parameters()) numel += parameter.numel();
  const int64_t world = trainer.world_size();
  out << std::dec << "rss_growth_bytes "
      << (model.peak >= 0 && model.baseline() >= 0 ? model.peak - model.baseline() : -1) << "\nmodel_bytes "
      << numel * 4 << "\nshard_bytes " << (numel + world - 1) / world * 4 << "\nlargest_unit_bytes "
      << (model.width() * model.width() + model.width()) * 4 << "\n";
  return out.good() ? 0 : 1;
}
