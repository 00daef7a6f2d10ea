// A GAN on sklearn's handwritten digits with manual optimization, Kiln's side of examples/real_models
// (lightning_twin.py's gan): the scripted generator and discriminator each step with their own fused Adam, toggled
// in turn, from training_step (set_automatic_optimization(false), optimizers(), manual_backward,
// toggle_optimizer), on dictionary batches {"image", "noise"} whose noise is drawn per epoch by the make step.
// With DEVICES > 1 it trains under DDP (STRATEGY, by default ddp_find_unused_parameters_true: each toggled step
// leaves the other network's parameters out), each process on its share of the digits as Lightning's
// DistributedSampler gives it, as lightning_twin.py's `train gan DIR DEVICES` does.
//
//   gan DIR [DEVICES [STRATEGY]]   (after lightning_twin.py make gan DIR)
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "ATen/ATen.h"
#include "examples/real_models/script_module.h"
#include "examples/real_models/twin_data.h"
#include "trainer/optim/fused_optimizers.h"

namespace {

constexpr int64_t kBatchSize = 32;

// The digits in order, each with the current epoch's noise. With several processes, each takes its share as
// Lightning gives a training loader under DDP (PyTorch's DistributedSampler, which Lightning shuffles for training,
// seed 0): the epoch's permutation, the first examples repeated so that every share has as many, and of that the
// examples rank, rank + world_size, ...
class EpochNoise final : public kiln::DataLoader {
 public:
  EpochNoise(at::Tensor images, at::Tensor noise)
      : images_(std::move(images)), noise_(std::move(noise)), examples_(at::arange(images_.size(0))) {}
  int64_t num_batches() const override { return (examples_.size(0) + kBatchSize - 1) / kBatchSize; }
  void set_epoch(int64_t epoch) override {
    epoch_ = epoch;
    Shard();
  }
  absl::Status set_shard(int rank, int world_size) override {
    rank_ = rank;
    world_size_ = world_size;
    Shard();
    return absl::OkStatus();
  }
  kiln::Batch get_batch(int64_t index) override {
    const int64_t start = index * kBatchSize;
    const at::Tensor examples = examples_.slice(0, start, std::min(start + kBatchSize, examples_.size(0)));
    c10::impl::GenericDict data(c10::StringType::get(), c10::TensorType::get());
    data.insert("image", images_.index_select(0, examples));
    data.insert("noise", noise_[epoch_].index_select(0, examples));
    kiln::Batch batch;
    batch.data = data;
    return batch;
  }

 private:
  // One process keeps the digits in order (Lightning's single-device loader is not shuffled).
  void Shard() {
    const int64_t total = images_.size(0);
    if (world_size_ == 1) {
      examples_ = at::arange(total);
      return;
    }
    const int64_t padded = (total + world_size_ - 1) / world_size_ * world_size_;
    at::Generator generator = at::detail::createCPUGenerator(static_cast<uint64_t>(epoch_));
    const at::Tensor order = at::randperm(total, generator, at::kLong);
    examples_ = at::cat({order, order.slice(0, 0, padded - total)}).slice(0, rank_, padded, world_size_);
  }

  at::Tensor images_;
  at::Tensor noise_;     // [epochs, images, noise]
  at::Tensor examples_;  // This process's examples, in order.
  int rank_ = 0;
  int world_size_ = 1;
  int64_t epoch_ = 0;
};

class Digits final : public kiln::DataModule {
 public:
  explicit Digits(std::map<std::string, at::Tensor> tensors) : tensors_(std::move(tensors)) {}
  std::shared_ptr<kiln::DataLoader> train_dataloader() override {
    return std::make_shared<EpochNoise>(tensors_.at("images"), tensors_.at("noise"));
  }

 private:
  std::map<std::string, at::Tensor> tensors_;
};

class Gan final : public kiln::examples::ScriptLightningModule {
 public:
  explicit Gan(const std::string& path)
      : ScriptLightningModule(path),
        generator_(script_.attr("generator").toModule()),
        discriminator_(script_.attr("discriminator").toModule()) {
    set_automatic_optimization(false);
  }

  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    std::vector<kiln::LightningOptimizer> optimizers = this->optimizers();
    kiln::LightningOptimizer& generator_step = optimizers[0];
    kiln::LightningOptimizer& discriminator_step = optimizers[1];
    const at::Tensor real = batch["image"];
    const at::Tensor ones = at::ones({real.size(0), 1});
    const at::Tensor zeros = at::zeros({real.size(0), 1});
    // The generator: make the discriminator call its images real.
    toggle_optimizer(generator_step);
    const at::Tensor fake = generator_.forward({batch["noise"]}).toTensor();
    const at::Tensor g_loss = at::binary_cross_entropy_with_logits(Discriminate(fake), ones);
    generator_step.zero_grad();
    manual_backward(g_loss);
    generator_step.step();
    untoggle_optimizer(generator_step);
    // The discriminator: tell the digits from the generator's images.
    toggle_optimizer(discriminator_step);
    const at::Tensor d_loss = 0.5 * (at::binary_cross_entropy_with_logits(Discriminate(real), ones) +
                                     at::binary_cross_entropy_with_logits(Discriminate(fake.detach()), zeros));
    discriminator_step.zero_grad();
    manual_backward(d_loss);
    discriminator_step.step();
    untoggle_optimizer(discriminator_step);
    log("g_loss", g_loss, {.prog_bar = true});
    log("d_loss", d_loss, {.prog_bar = true});
    return at::Tensor();
  }

  kiln::OptimizerConfig configure_optimizers() override {
    const auto adam = [](torch::jit::Module& module) {
      std::vector<at::Tensor> parameters;
      for (const at::Tensor& parameter : module.parameters()) parameters.push_back(parameter);
      return std::make_shared<kiln::FusedAdam>(parameters, torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
    };
    kiln::OptimizerConfig config;
    config.optimizers = {adam(generator_), adam(discriminator_)};
    return config;
  }

 private:
  at::Tensor Discriminate(const at::Tensor& images) { return discriminator_.forward({images}).toTensor(); }

  torch::jit::Module generator_;
  torch::jit::Module discriminator_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::cerr << "usage: gan DIR [DEVICES [STRATEGY]] (after lightning_twin.py make gan DIR)\n";
    return 2;
  }
  const std::string dir = argv[1];
  Gan model(dir + "/model.pt");
  Digits data(kiln::examples::LoadTwinData(dir));
  kiln::TrainerOptions options = kiln::examples::TwinOptions(dir);
  options.max_epochs = 4;
  if (argc >= 3 && std::string(argv[2]) != "1") {
    options.devices = argv[2];
    options.strategy = argc == 4 ? argv[3] : "ddp_find_unused_parameters_true";
  }
  kiln::Trainer trainer(options);
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "gan: rank " << trainer.global_rank() << ": " << status << "\n";
    return 1;
  }
  if (trainer.is_global_zero()) std::cout << "global_step " << trainer.global_step() << "\n";
  return 0;
}
