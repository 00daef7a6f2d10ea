// A user's program with kiln::Tuner, for tests/third_party/tuner_npu_test.sh: the batch-size finder on a device
// whose memory runs out (the virtual NPU with VIRTUAL_NPU_MEMORY_LIMIT), and both finders on 2 processes (DDP).
//
//   tuner_program probe ACCELERATOR BATCH   one trial of the batch-size finder at BATCH (init_val = BATCH,
//                                           max_trials = 1); prints "peak N": the most bytes device 0 held in it
//   tuner_program search ACCELERATOR MODE   scale_batch_size(mode = MODE, margin = 0); prints "size N"
//   tuner_program ddp DIR DEVICES           on the CPU: lr_find (update_attr), then scale_batch_size, then fit with the
//                                           learning rate found; each rank writes DIR/rank_<R>.txt: its lr_find
//                                           points, its suggestion, the module's lr after it, what scale_batch_size
//                                           answered, and how fit ended
//
// The model: Linear(16, 64), Tanh, Linear(64, 4), Adam; the data: 2048 training and 256 validation rows of 16
// features, whose loaders take the data module's "batch_size", as a Lightning datamodule's do.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ATen/ATen.h"
#include "ATen/CPUGeneratorImpl.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "hal/registry.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "trainer/trainer.h"
#include "trainer/tuner.h"

namespace {

class Net : public kiln::LightningModule, public kiln::TunableAttributes {
 public:
  Net() {
    torch::manual_seed(0);
    net_ = register_module("net", torch::nn::Sequential(torch::nn::Linear(16, 64), torch::nn::Tanh(),
                                                        torch::nn::Linear(64, 4)));
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t) override {
    return torch::nn::functional::cross_entropy(net_->forward(batch.input), batch.target);
  }
  void validation_step(const kiln::Batch& batch, int64_t) override {
    log("val_loss", torch::nn::functional::cross_entropy(net_->forward(batch.input), batch.target));
  }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(lr));
  }
  std::optional<double> get_attribute(std::string_view name) const override {
    if (name == "lr") return lr;
    return std::nullopt;
  }
  void set_attribute(std::string_view name, double value) override { lr = value; }

  double lr = 1e-3;

 private:
  torch::nn::Sequential net_{nullptr};
};

class Rows : public kiln::DataModule, public kiln::TunableAttributes {
 public:
  Rows() {
    at::Generator generator = at::detail::createCPUGenerator(11);
    x_ = at::randn({2304, 16}, generator);
    y_ = at::randint(0, 4, {2304}, generator);
  }
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    return std::make_shared<kiln::TensorDataLoader>(x_.slice(0, 0, 2048), y_.slice(0, 0, 2048),
                                                    kiln::TensorDataLoaderOptions{.batch_size = batch_size});
  }
  std::shared_ptr<kiln::DataLoader> val_dataloader() override {
    return std::make_shared<kiln::TensorDataLoader>(x_.slice(0, 2048), y_.slice(0, 2048),
                                                    kiln::TensorDataLoaderOptions{.batch_size = batch_size});
  }
  std::optional<double> get_attribute(std::string_view name) const override {
    if (name == "batch_size") return static_cast<double>(batch_size);
    return std::nullopt;
  }
  void set_attribute(std::string_view name, double value) override { batch_size = static_cast<int64_t>(value); }

  int64_t batch_size = 32;

 private:
  at::Tensor x_, y_;
};

kiln::TrainerOptions Options(const std::string& accelerator, const std::string& devices, const std::string& dir) {
  return {.accelerator = accelerator,
          .devices = devices,
          .max_epochs = 1,
          .default_root_dir = dir,
          .logger = false,
          .enable_checkpointing = false,
          .enable_progress_bar = false,
          .enable_model_summary = false};
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  return 1;
}

int Probe(const std::string& accelerator, int64_t batch) {
  kiln::Trainer trainer(Options(accelerator, "1", "."));
  Net model;
  Rows data;
  absl::StatusOr<std::optional<int64_t>> size =
      kiln::Tuner(trainer).scale_batch_size(model, data, {.init_val = batch, .max_trials = 1, .margin = 0});
  if (!size.ok()) return Fail(absl::StrCat("scale_batch_size: ", size.status().ToString()));
  if (**size != batch) return Fail(absl::StrCat("one trial at ", batch, " answered ", **size));
  absl::StatusOr<std::shared_ptr<kiln::Accelerator>> found = kiln::AcceleratorRegistry::Default().Get(accelerator);
  if (!found.ok()) return Fail(found.status().ToString());
  absl::StatusOr<kiln::DeviceStats> stats = (*found)->GetDeviceStats(kiln::LogicalDevices(**found, {0})[0]);
  if (!stats.ok() || stats->count("memory_allocated_peak_bytes") == 0) return Fail("no memory_allocated_peak_bytes");
  std::printf("peak %.0f\n", stats->at("memory_allocated_peak_bytes"));
  return 0;
}

int Search(const std::string& accelerator, const std::string& mode) {
  kiln::Trainer trainer(Options(accelerator, "1", "."));
  Net model;
  Rows data;
  absl::StatusOr<std::optional<int64_t>> size =
      kiln::Tuner(trainer).scale_batch_size(model, data, {.mode = mode, .margin = 0});
  if (!size.ok()) return Fail(absl::StrCat("scale_batch_size: ", size.status().ToString()));
  if (data.batch_size != **size) return Fail("the data module's batch_size is not the result");
  std::printf("size %lld\n", static_cast<long long>(**size));
  return 0;
}

int Ddp(const std::string& dir, const std::string& devices) {
  kiln::Trainer trainer(Options("cpu", devices, dir));
  Net model;
  Rows data;
  absl::StatusOr<std::optional<kiln::LRFinder>> found =
      kiln::Tuner(trainer).lr_find(model, data, {.min_lr = 1e-5, .max_lr = 1, .num_training = 30});
  // After the first entry point every process carries its rank (distributed_program.h).
  const char* rank = std::getenv("LOCAL_RANK");
  std::ofstream out(absl::StrCat(dir, "/rank_", rank != nullptr ? rank : "0", ".txt"));
  if (!found.ok()) {
    out << "lr_find error " << found.status().ToString() << "\n";
    return 1;
  }
  const kiln::LRFinder& finder = **found;
  for (size_t i = 0; i < finder.lrs.size(); ++i) {
    out << absl::StrFormat("point %d %.17g %.17g\n", i, finder.lrs[i], finder.losses[i]);
  }
  const std::optional<double> suggestion = finder.suggestion();
  out << absl::StrFormat("suggestion %.17g\nlr %.17g\n", suggestion.value_or(-1), model.lr);
  absl::StatusOr<std::optional<int64_t>> size = kiln::Tuner(trainer).scale_batch_size(model, data);
  out << "scale_batch_size " << (size.ok() ? absl::StrCat("size ", size->value_or(-1)) : size.status().ToString())
      << "\n";
  const absl::Status fitted = trainer.fit(model, data);
  out << "fit " << (fitted.ok() ? "ok" : fitted.ToString()) << "\n";
  return fitted.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  const std::string command = argc > 1 ? argv[1] : "";
  int64_t batch = 0;
  if (argc == 4 && command == "probe" && absl::SimpleAtoi(argv[3], &batch)) return Probe(argv[2], batch);
  if (argc == 4 && command == "search") return Search(argv[2], argv[3]);
  if (argc == 4 && command == "ddp") return Ddp(argv[2], argv[3]);
  std::fprintf(stderr, "usage: %s probe ACCELERATOR BATCH | search ACCELERATOR MODE | ddp DIR DEVICES\n", argv[0]);
  return 2;
}
