// Test support for the trainer: a classifier that records what the loops call, small synthetic data, quiet trainer
// options, fresh temporary folders, and whole-file reads and writes. Test-only (testonly in BUILD).
#ifndef KILN_TRAINER_TESTING_TEST_SUPPORT_H_
#define KILN_TRAINER_TESTING_TEST_SUPPORT_H_

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "torch/nn/functional/loss.h"
#include "trainer/classifier.h"
#include "trainer/core/lightning_module.h"
#include "trainer/synthetic_data.h"
#include "trainer/trainer.h"

namespace kiln::testing {

// A fresh, empty folder under the test's temporary directory.
inline std::string TempDir() {
  static int counter = 0;
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(root != nullptr ? root : "/tmp") + "/kiln_test_" + std::to_string(::getpid()) + "_" +
      std::to_string(counter++);
  std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  return dir;
}

// The bytes of the file at `path` (empty when it cannot be read).
inline std::string FileBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// Replaces the file at `path` with `bytes`.
inline void Overwrite(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << bytes;
}

// `options` for a quiet test run: no progress bar; one CPU device unless the test gives an accelerator instance; and
// a fresh folder unless the test chose one.
inline TrainerOptions Quiet(TrainerOptions options) {
  options.enable_progress_bar = false;
  if (options.accelerator.instance() == nullptr) {
    options.accelerator = "cpu";
    options.devices = 1;
  }
  if (options.default_root_dir == ".") options.default_root_dir = TempDir();
  return options;
}

// 640 training examples (10 batches of 64) and 256 validation examples (4 batches).
inline SyntheticOptions SmallData() {
  SyntheticOptions options;
  options.num_train = 640;
  options.num_val = 256;
  return options;
}

// An MLP classifier that records the hooks and steps the trainer calls, and can be told to throw.
class RecordingClassifier : public LightningModule {
 public:
  explicit RecordingClassifier(const MlpOptions& options = {})
      : inner_(std::make_shared<MlpClassifier>(options)), options_(options) {
    register_module("inner", inner_);
  }
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    ++training_steps;
    if (throw_at_step == training_steps) throw std::runtime_error("boom at step " + std::to_string(training_steps));
    at::Tensor loss = torch::nn::functional::cross_entropy(inner_->forward(batch.input), batch.target);
    log("train_loss", loss, {.prog_bar = true, .on_step = true, .on_epoch = true});
    return loss;
  }
  void validation_step(const Batch& batch, int64_t batch_idx) override {
    ++validation_steps;
    at::Tensor logits = inner_->forward(batch.input);
    log("val_loss", torch::nn::functional::cross_entropy(logits, batch.target));
    log("val_acc", logits.argmax(1).eq(batch.target).to(at::kFloat).mean());
  }
  void test_step(const Batch& batch, int64_t batch_idx) override {
    ++test_steps;
    log("test_loss", torch::nn::functional::cross_entropy(inner_->forward(batch.input), batch.target));
  }
  at::Tensor predict_step(const Batch& batch, int64_t batch_idx) override { return inner_->forward(batch.input); }
  OptimizerConfig configure_optimizers() override {
    OptimizerConfig config = inner_->configure_optimizers();
    if (make_scheduler) config.schedulers = make_scheduler(*config.optimizers[0]);
    return config;
  }
  void on_fit_start() override { hooks.push_back("on_fit_start"); }
  void on_train_epoch_start() override { hooks.push_back("on_train_epoch_start"); }
  void on_validation_epoch_end() override { hooks.push_back("on_validation_epoch_end"); }
  void on_train_epoch_end() override { hooks.push_back("on_train_epoch_end"); }
  void on_fit_end() override { hooks.push_back("on_fit_end"); }

  std::vector<std::string> hooks;
  int64_t training_steps = 0;
  int64_t validation_steps = 0;
  int64_t test_steps = 0;
  int64_t throw_at_step = -1;
  std::function<std::vector<SchedulerConfig>(torch::optim::Optimizer&)> make_scheduler;

 private:
  std::shared_ptr<MlpClassifier> inner_;
  MlpOptions options_;
};

// All parameters, flattened into one tensor (for exact comparisons).
inline at::Tensor FlatParameters(torch::nn::Module& module) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor& parameter : module.parameters()) flat.push_back(parameter.detach().reshape({-1}));
  return at::cat(flat);
}

// Saves a checkpoint to `path` after batch `batch` of epoch `epoch` (Trainer::save_checkpoint), keeping what that
// returned in `saved`, for a test to check (a hook cannot return an error).
class SaveCheckpointAt final : public Callback {
 public:
  SaveCheckpointAt(int64_t epoch, int64_t batch, std::string path)
      : epoch_(epoch), batch_(batch), path_(std::move(path)) {}
  std::string state_key() const override { return "SaveCheckpointAt"; }
  void on_train_batch_end(Trainer& trainer, LightningModule&, const at::Tensor&, const Batch&,
                          int64_t batch_idx) override {
    if (trainer.current_epoch() == epoch_ && batch_idx == batch_) saved = trainer.save_checkpoint(path_);
  }
  absl::Status saved = absl::UnknownError("not saved");

 private:
  int64_t epoch_;
  int64_t batch_;
  std::string path_;
};

}  // namespace kiln::testing

#endif  // KILN_TRAINER_TESTING_TEST_SUPPORT_H_
