// FSDP mixed precision from a user's program (TrainerOptions::fsdp.mixed_precision), for the test that compares it
// with Lightning (tests/lightning/fsdp_mixed_precision_test.sh, whose Lightning side, fsdp_mixed_precision.py, builds
// the same module, weights and batches).
//
//   fsdp_mixed_precision OUT [devices=N] [param_dtype=bf16] [reduce_dtype=D] [buffer_dtype=D] [precision=P]
//
// The module: a Sequential "net" of Linear(6, 8), Tanh, Linear(8, 3), each parameter filled with
// 0.5 * sin(1.3 * k + 0.7 * p) (k: its index within the parameter, p: the parameter's index), and a buffer "scale"
// (ones(3), multiplying the output); mean squared error against the targets cast to the output's type; SGD(lr=0.1,
// momentum=0.9); 64 rows of 6 inputs (sin(0.37 * i)) and 3 targets (cos(0.21 * i)) in batches of 8, in order, 2
// epochs. fsdp with each Linear a unit, FULL_SHARD. Each rank writes to OUT.rank<R> (OUT itself on rank 0) the
// module's final parameters and buffers, one "name v v ..." line each, in hexadecimal floating point (exact), with
// their type ("name dtype v v ..."), then the global step.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "ATen/ATen.h"
#include "glog/logging.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/activation.h"
#include "torch/nn/modules/container/sequential.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/kiln.h"

namespace {

at::Tensor Inputs(int64_t rows) { return at::sin(at::arange(rows * 6, at::kFloat) * 0.37).reshape({rows, 6}); }
at::Tensor Targets(int64_t rows) { return at::cos(at::arange(rows * 3, at::kFloat) * 0.21).reshape({rows, 3}); }

class Data final : public kiln::DataModule {
 public:
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    return std::make_shared<kiln::TensorDataLoader>(Inputs(64), Targets(64),
                                                    kiln::TensorDataLoaderOptions{.batch_size = 8});
  }
};

class Net final : public kiln::LightningModule {
 public:
  Net() {
    net_ = register_module("net", torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::Tanh(),
                                                        torch::nn::Linear(8, 3)));
    scale_ = register_buffer("scale", at::ones({3}));
    torch::NoGradGuard no_grad;
    int64_t p = 0;
    for (at::Tensor& parameter : parameters()) {
      const at::Tensor k = at::arange(parameter.numel(), at::kFloat);
      parameter.copy_((at::sin(k * 1.3 + 0.7 * static_cast<double>(p)) * 0.5).reshape(parameter.sizes()));
      ++p;
    }
  }
  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    const at::Tensor out = net_->forward(batch.input) * scale_;
    return torch::nn::functional::mse_loss(out, batch.target.to(out.scalar_type()));
  }
  kiln::OptimizerConfig configure_optimizers() override {
    return kiln::OptimizerConfig(
        std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)));
  }

 private:
  torch::nn::Sequential net_{nullptr};
  at::Tensor scale_;
};

std::string Arg(int argc, char** argv, const std::string& name, const std::string& fallback = "") {
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(name + "=", 0) == 0) return arg.substr(name.size() + 1);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (argc < 2) {
    std::fprintf(stderr, "usage: fsdp_mixed_precision OUT [devices=N] [param_dtype=D] [reduce_dtype=D] "
                         "[buffer_dtype=D] [precision=P]\n");
    return 2;
  }
  const std::string out = argv[1];
  kiln::FSDPOptions fsdp{.auto_wrap_policy = {.module_types = {"Linear"}}};
  for (const auto& [name, field] : {std::pair{"param_dtype", &fsdp.mixed_precision.param_dtype},
                                    std::pair{"reduce_dtype", &fsdp.mixed_precision.reduce_dtype},
                                    std::pair{"buffer_dtype", &fsdp.mixed_precision.buffer_dtype}}) {
    const std::string text = Arg(argc, argv, name);
    if (text.empty()) continue;
    absl::StatusOr<kiln::FsdpDtype> dtype = kiln::ParseFsdpDtype(text);
    if (!dtype.ok()) {
      std::fprintf(stderr, "%s\n", std::string(dtype.status().message()).c_str());
      return 2;
    }
    *field = *dtype;
  }
  kiln::Trainer trainer({.accelerator = "cpu",
                         .devices = std::stoi(Arg(argc, argv, "devices", "2")),
                         .strategy = "fsdp",
                         .fsdp = fsdp,
                         .precision = Arg(argc, argv, "precision", "32-true"),
                         .max_epochs = 2,
                         .logger = false,
                         .enable_checkpointing = false,
                         .enable_progress_bar = false,
                         .enable_model_summary = false});
  Net net;
  Data data;
  if (absl::Status status = trainer.fit(net, data); !status.ok()) {
    std::fprintf(stderr, "fit failed: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  const std::string path = trainer.global_rank() == 0 ? out : out + ".rank" + std::to_string(trainer.global_rank());
  std::ofstream file(path);
  const auto write = [&](const std::string& name, const at::Tensor& tensor) {
    file << name << " " << c10::toString(tensor.scalar_type());
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
  file << "global_step " << trainer.global_step() << "\n";
  return file.good() ? 0 : 1;
}
