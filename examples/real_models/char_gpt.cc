// A byte-level GPT, Kiln's side of examples/real_models (lightning_twin.py's char_gpt): causal self-attention over
// the bytes of a text file from a Debian package (/usr/share/common-licenses/GPL-3), read as a stream of dictionary
// batches {"input_ids", "labels"} (consecutive windows, a block at a time; DataLoader::kUnknownLength), trained with
// bf16-mixed precision, gradient clipping by norm, fused AdamW and a cosine schedule after a linear warm-up, for 200
// steps (about three passes over the file).
//
//   char_gpt DIR   (after lightning_twin.py make char_gpt DIR)
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "examples/real_models/script_module.h"
#include "examples/real_models/twin_data.h"
#include "trainer/optim/cosine_annealing_lr.h"
#include "trainer/optim/fused_optimizers.h"
#include "trainer/optim/linear_lr.h"
#include "trainer/optim/sequential_lr.h"

namespace {

constexpr int64_t kSteps = 200;
constexpr int64_t kBatchSize = 8;
constexpr int64_t kBlock = 64;
constexpr int64_t kWarmup = 20;
constexpr char kText[] = "/usr/share/common-licenses/GPL-3";

// The file's bytes as windows of kBlock + 1 (the inputs and the next bytes), each starting where the last one's
// inputs ended, kBatchSize windows a batch; its position (a byte offset) is its state.
class TextStream final : public kiln::DataLoader {
 public:
  explicit TextStream(std::string path) : path_(std::move(path)), file_(path_, std::ios::binary) {}
  int64_t num_batches() const override { return kUnknownLength; }
  void set_epoch(int64_t) override { Seek(0); }
  std::optional<kiln::Batch> next_batch() override {
    std::vector<at::Tensor> windows;
    std::vector<char> bytes(kBlock + 1);
    while (static_cast<int64_t>(windows.size()) < kBatchSize) {
      file_.read(bytes.data(), kBlock + 1);
      if (file_.gcount() < kBlock + 1) break;
      offset_ += kBlock;
      Seek(offset_);
      at::Tensor ids = at::empty({kBlock + 1}, at::kLong);
      for (int64_t i = 0; i <= kBlock; ++i) ids[i] = static_cast<int64_t>(static_cast<unsigned char>(bytes[i]));
      windows.push_back(ids);
    }
    if (windows.empty()) return std::nullopt;
    const at::Tensor ids = at::stack(windows);
    c10::impl::GenericDict data(c10::StringType::get(), c10::TensorType::get());
    data.insert("input_ids", ids.slice(1, 0, kBlock));
    data.insert("labels", ids.slice(1, 1, kBlock + 1));
    kiln::Batch batch;
    batch.data = data;
    return batch;
  }
  c10::IValue state_dict() const override { return c10::IValue(offset_); }
  absl::Status load_state_dict(const c10::IValue& state) override {
    if (!state.isInt()) return absl::InvalidArgumentError("a TextStream's state is its byte offset");
    Seek(state.toInt());
    return absl::OkStatus();
  }

 private:
  void Seek(int64_t offset) {
    offset_ = offset;
    file_.clear();
    file_.seekg(offset);
  }
  std::string path_;
  std::ifstream file_;
  int64_t offset_ = 0;
};

class Text final : public kiln::DataModule {
 public:
  std::shared_ptr<kiln::DataLoader> train_dataloader() override { return std::make_shared<TextStream>(kText); }
};

class CharGpt final : public kiln::examples::ScriptLightningModule {
 public:
  using ScriptLightningModule::ScriptLightningModule;

  at::Tensor training_step(const kiln::Batch& batch, int64_t batch_idx) override {
    const at::Tensor logits = script_.forward({batch["input_ids"]}).toTensor();
    const at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, 256}), batch["labels"].reshape(-1));
    log("train_loss", loss, {.prog_bar = true});
    return loss;
  }

  kiln::OptimizerConfig configure_optimizers() override {
    auto adamw = std::make_shared<kiln::FusedAdamW>(parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.1));
    auto warmup = std::make_shared<kiln::LinearLR>(*adamw, 0.01, 1.0, kWarmup);
    auto cosine = std::make_shared<kiln::CosineAnnealingLR>(*adamw, kSteps - kWarmup);
    kiln::OptimizerConfig config(adamw);
    config.schedulers.push_back(
        {.scheduler = std::make_shared<kiln::SequentialLR>(
             *adamw, std::vector<std::shared_ptr<kiln::LRScheduler>>{warmup, cosine},
             std::vector<int64_t>{kWarmup}),
         .interval = kiln::SchedulerConfig::Interval::kStep});
    return config;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: char_gpt DIR (after lightning_twin.py make char_gpt DIR)\n";
    return 2;
  }
  const std::string dir = argv[1];
  CharGpt model(dir + "/model.pt");
  Text data;
  kiln::TrainerOptions options = kiln::examples::TwinOptions(dir);
  options.max_steps = kSteps;
  options.precision = "bf16-mixed";
  options.gradient_clip_val = 1.0;
  kiln::Trainer trainer(options);
  if (absl::Status status = trainer.fit(model, data); !status.ok()) {
    std::cerr << "char_gpt: " << status << "\n";
    return 1;
  }
  std::cout << "global_step " << trainer.global_step() << "\n";
  return 0;
}
