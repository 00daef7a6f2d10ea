// A GAN on sklearn's handwritten digits with manual optimization, Kiln's side of examples/real_models
// (lightning_twin.py's gan): the scripted generator and discriminator each step with their own fused Adam, toggled
// in turn, from training_step (set_automatic_optimization(false), optimizers(), manual_backward,
// toggle_optimizer), on dictionary batches {"image", "noise"} whose noise is drawn per epoch by the make step.
//
//   gan DIR   (after lightning_twin.py make gan DIR)
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

// The digits, each with the current epoch's noise.
class EpochNoise final : public kiln::DataLoader {
 public:
  EpochNoise(at::Tensor images, at::Tensor noise) : images_(std::move(images)), noise_(std::move(noise)) {}
  int64_t num_batches() const override { return (images_.size(0) + kBatchSize - 1) / kBatchSize; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  kiln::Batch get_batch(int64_t index) override {
    const int64_t start = index * kBatchSize;
    const int64_t end = std::min(start + kBatchSize, images_.size(0));
    c10::impl::GenericDict data(c10::StringType::get(), c10::TensorType::get());
    data.insert("image", images_.slice(0, start, end));
    data.insert("noise", noise_[epoch_].slice(0, start, end));
    kiln::Batch batch;
    batch.data = data;
    return batch;
  }

 private:
  at::Tensor images_;
  at::Tensor noise_;  // [epochs, images, noise]
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
  if (argc != 2) {
    std::cerr << "usage: gan DIR (after lightning_twin.py make gan DIR)\n";
    return 2;
  }
  const std::string dir = argv[1];
  Gan model(dir + "/model.pt");
  Digits data(kiln::examples::LoadTwinData(dir));
  kiln::TrainerOptions options = kiln::examples::TwinOptions(dir);
  options.max_epochs = 4;
  kiln::Trainer trainer(options);
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "gan: " << status << "\n";
    return 1;
  }
  std::cout << "global_step " << trainer.global_step() << "\n";
  return 0;
}
