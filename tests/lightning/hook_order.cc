// The hooks Kiln calls, in the order it calls them, for the run tests/lightning/hook_order.py makes Lightning do:
// fit (one epoch of 2 training batches, 2 sanity and 2 validation batches, the epoch's checkpoint), validate from
// that checkpoint, test and predict (2 batches each). One line per call: "Callback.<hook>" for a callback's,
// "<hook>" for the module's, ":<stage>" after setup and teardown, and "== <entry point>" before each entry point.
//
//   hook_order           the calls
//   hook_order --manual  the calls under manual optimization
//   hook_order --hooks   the hooks it records (hook_order.py records the same ones in Lightning)
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/sgd.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/kiln.h"

namespace {

std::vector<std::string>& Calls() {
  static auto* calls = new std::vector<std::string>();
  return *calls;
}

void Record(const std::string& name) { Calls().push_back(name); }

std::string StageName(kiln::Stage stage) {
  switch (stage) {
    case kiln::Stage::kFit: return "fit";
    case kiln::Stage::kValidate: return "validate";
    case kiln::Stage::kTest: return "test";
    case kiln::Stage::kPredict: return "predict";
  }
  return "?";
}

const char* const kModuleHooks[] = {
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_train_start", "on_train_end", "on_train_epoch_start",
    "on_train_epoch_end", "on_train_batch_start", "on_train_batch_end", "on_validation_start", "on_validation_end",
    "on_validation_epoch_start", "on_validation_epoch_end", "on_validation_batch_start", "on_validation_batch_end",
    "on_test_start", "on_test_end", "on_test_epoch_start", "on_test_epoch_end", "on_test_batch_start",
    "on_test_batch_end", "on_predict_start", "on_predict_end", "on_predict_epoch_start", "on_predict_epoch_end",
    "on_predict_batch_start", "on_predict_batch_end", "on_validation_model_eval", "on_validation_model_train",
    "on_test_model_eval", "on_test_model_train", "on_predict_model_eval", "on_before_batch_transfer",
    "transfer_batch_to_device", "on_after_batch_transfer", "on_before_zero_grad", "on_before_backward",
    "on_after_backward", "on_before_optimizer_step", "configure_gradient_clipping", "on_save_checkpoint",
    "on_load_checkpoint"};

const char* const kCallbackHooks[] = {
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_train_start", "on_train_end", "on_train_epoch_start", "on_train_epoch_end", "on_train_batch_start",
    "on_train_batch_end", "on_before_backward", "on_after_backward", "on_before_optimizer_step",
    "on_before_zero_grad", "on_validation_start", "on_validation_end", "on_validation_epoch_start",
    "on_validation_epoch_end", "on_validation_batch_start", "on_validation_batch_end", "on_test_start",
    "on_test_end", "on_test_epoch_start", "on_test_epoch_end", "on_test_batch_start", "on_test_batch_end",
    "on_predict_start", "on_predict_end", "on_predict_epoch_start", "on_predict_epoch_end",
    "on_predict_batch_start", "on_predict_batch_end", "on_exception"};

class HookedModule final : public kiln::LightningModule {
 public:
  HookedModule() { layer_ = register_module("layer", torch::nn::Linear(4, 1)); }

  at::Tensor training_step(const kiln::Batch& batch, int64_t) override {
    at::Tensor loss = at::mse_loss(layer_->forward(batch.input), batch.target);
    if (automatic_optimization()) return loss;
    kiln::LightningOptimizer optimizer = optimizers()[0];
    optimizer.zero_grad();
    manual_backward(loss);
    optimizer.step();
    return loss;
  }
  void validation_step(const kiln::Batch& batch, int64_t) override {
    log("val_loss", at::mse_loss(layer_->forward(batch.input), batch.target));
  }
  void test_step(const kiln::Batch& batch, int64_t) override {
    log("test_loss", at::mse_loss(layer_->forward(batch.input), batch.target));
  }
  at::Tensor predict_step(const kiln::Batch& batch, int64_t) override { return layer_->forward(batch.input); }
  kiln::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }

  void setup(kiln::Stage stage) override { Record("setup:" + StageName(stage)); }
  void teardown(kiln::Stage stage) override { Record("teardown:" + StageName(stage)); }
  void on_fit_start() override { Record("on_fit_start"); }
  void on_fit_end() override { Record("on_fit_end"); }
  void on_train_start() override { Record("on_train_start"); }
  void on_train_end() override { Record("on_train_end"); }
  void on_train_epoch_start() override { Record("on_train_epoch_start"); }
  void on_train_epoch_end() override { Record("on_train_epoch_end"); }
  int on_train_batch_start(const kiln::Batch&, int64_t) override {
    Record("on_train_batch_start");
    return 0;
  }
  void on_train_batch_end(const at::Tensor&, const kiln::Batch&, int64_t) override { Record("on_train_batch_end"); }
  void on_validation_start() override { Record("on_validation_start"); }
  void on_validation_end() override { Record("on_validation_end"); }
  void on_validation_epoch_start() override { Record("on_validation_epoch_start"); }
  void on_validation_epoch_end() override { Record("on_validation_epoch_end"); }
  void on_validation_batch_start(const kiln::Batch&, int64_t, int64_t) override {
    Record("on_validation_batch_start");
  }
  void on_validation_batch_end(const kiln::Batch&, int64_t, int64_t) override { Record("on_validation_batch_end"); }
  void on_test_start() override { Record("on_test_start"); }
  void on_test_end() override { Record("on_test_end"); }
  void on_test_epoch_start() override { Record("on_test_epoch_start"); }
  void on_test_epoch_end() override { Record("on_test_epoch_end"); }
  void on_test_batch_start(const kiln::Batch&, int64_t, int64_t) override { Record("on_test_batch_start"); }
  void on_test_batch_end(const kiln::Batch&, int64_t, int64_t) override { Record("on_test_batch_end"); }
  void on_predict_start() override { Record("on_predict_start"); }
  void on_predict_end() override { Record("on_predict_end"); }
  void on_predict_epoch_start() override { Record("on_predict_epoch_start"); }
  void on_predict_epoch_end() override { Record("on_predict_epoch_end"); }
  void on_predict_batch_start(const kiln::Batch&, int64_t, int64_t) override { Record("on_predict_batch_start"); }
  void on_predict_batch_end(const at::Tensor&, const kiln::Batch&, int64_t, int64_t) override {
    Record("on_predict_batch_end");
  }
  void on_validation_model_eval() override {
    Record("on_validation_model_eval");
    LightningModule::on_validation_model_eval();
  }
  void on_validation_model_train() override {
    Record("on_validation_model_train");
    LightningModule::on_validation_model_train();
  }
  void on_test_model_eval() override {
    Record("on_test_model_eval");
    LightningModule::on_test_model_eval();
  }
  void on_test_model_train() override {
    Record("on_test_model_train");
    LightningModule::on_test_model_train();
  }
  void on_predict_model_eval() override {
    Record("on_predict_model_eval");
    LightningModule::on_predict_model_eval();
  }
  kiln::Batch on_before_batch_transfer(kiln::Batch batch, int64_t) override {
    Record("on_before_batch_transfer");
    return batch;
  }
  kiln::Batch transfer_batch_to_device(const kiln::Batch& batch, c10::Device device, int64_t index) override {
    Record("transfer_batch_to_device");
    return LightningModule::transfer_batch_to_device(batch, device, index);
  }
  kiln::Batch on_after_batch_transfer(kiln::Batch batch, int64_t) override {
    Record("on_after_batch_transfer");
    return batch;
  }
  void on_before_zero_grad(torch::optim::Optimizer&) override { Record("on_before_zero_grad"); }
  void on_before_backward(const at::Tensor&) override { Record("on_before_backward"); }
  void on_after_backward() override { Record("on_after_backward"); }
  void on_before_optimizer_step(torch::optim::Optimizer&) override { Record("on_before_optimizer_step"); }
  void configure_gradient_clipping(torch::optim::Optimizer& optimizer, std::optional<double> value,
                                   std::optional<std::string> algorithm) override {
    Record("configure_gradient_clipping");
    LightningModule::configure_gradient_clipping(optimizer, value, algorithm);
  }
  void on_save_checkpoint(c10::impl::GenericDict&) override { Record("on_save_checkpoint"); }
  void on_load_checkpoint(const c10::impl::GenericDict&) override { Record("on_load_checkpoint"); }

 private:
  torch::nn::Linear layer_{nullptr};
};

class HookedCallback final : public kiln::Callback {
 public:
  std::string state_key() const override { return "HookedCallback"; }
  void setup(kiln::Trainer&, kiln::LightningModule&, kiln::Stage stage) override {
    Record("Callback.setup:" + StageName(stage));
  }
  void teardown(kiln::Trainer&, kiln::LightningModule&, kiln::Stage stage) override {
    Record("Callback.teardown:" + StageName(stage));
  }
#define KILN_RECORD(hook) \
  void hook(kiln::Trainer&, kiln::LightningModule&) override { Record("Callback." #hook); }
  KILN_RECORD(on_fit_start)
  KILN_RECORD(on_fit_end)
  KILN_RECORD(on_sanity_check_start)
  KILN_RECORD(on_sanity_check_end)
  KILN_RECORD(on_train_start)
  KILN_RECORD(on_train_end)
  KILN_RECORD(on_train_epoch_start)
  KILN_RECORD(on_train_epoch_end)
  KILN_RECORD(on_after_backward)
  KILN_RECORD(on_validation_start)
  KILN_RECORD(on_validation_end)
  KILN_RECORD(on_validation_epoch_start)
  KILN_RECORD(on_validation_epoch_end)
  KILN_RECORD(on_test_start)
  KILN_RECORD(on_test_end)
  KILN_RECORD(on_test_epoch_start)
  KILN_RECORD(on_test_epoch_end)
  KILN_RECORD(on_predict_start)
  KILN_RECORD(on_predict_end)
  KILN_RECORD(on_predict_epoch_start)
  KILN_RECORD(on_predict_epoch_end)
#undef KILN_RECORD
  void on_train_batch_start(kiln::Trainer&, kiln::LightningModule&, const kiln::Batch&, int64_t) override {
    Record("Callback.on_train_batch_start");
  }
  void on_train_batch_end(kiln::Trainer&, kiln::LightningModule&, const at::Tensor&, const kiln::Batch&,
                          int64_t) override {
    Record("Callback.on_train_batch_end");
  }
  void on_before_backward(kiln::Trainer&, kiln::LightningModule&, const at::Tensor&) override {
    Record("Callback.on_before_backward");
  }
  void on_before_optimizer_step(kiln::Trainer&, kiln::LightningModule&, torch::optim::Optimizer&) override {
    Record("Callback.on_before_optimizer_step");
  }
  void on_before_zero_grad(kiln::Trainer&, kiln::LightningModule&, torch::optim::Optimizer&) override {
    Record("Callback.on_before_zero_grad");
  }
  void on_validation_batch_start(kiln::Trainer&, kiln::LightningModule&, const kiln::Batch&, int64_t,
                                 int64_t) override {
    Record("Callback.on_validation_batch_start");
  }
  void on_validation_batch_end(kiln::Trainer&, kiln::LightningModule&, const kiln::Batch&, int64_t,
                               int64_t) override {
    Record("Callback.on_validation_batch_end");
  }
  void on_test_batch_start(kiln::Trainer&, kiln::LightningModule&, const kiln::Batch&, int64_t, int64_t) override {
    Record("Callback.on_test_batch_start");
  }
  void on_test_batch_end(kiln::Trainer&, kiln::LightningModule&, const kiln::Batch&, int64_t, int64_t) override {
    Record("Callback.on_test_batch_end");
  }
  void on_predict_batch_start(kiln::Trainer&, kiln::LightningModule&, const kiln::Batch&, int64_t,
                              int64_t) override {
    Record("Callback.on_predict_batch_start");
  }
  void on_predict_batch_end(kiln::Trainer&, kiln::LightningModule&, const at::Tensor&, const kiln::Batch&, int64_t,
                            int64_t) override {
    Record("Callback.on_predict_batch_end");
  }
  void on_exception(kiln::Trainer&, kiln::LightningModule&, const absl::Status&) override {
    Record("Callback.on_exception");
  }
};

// Four examples of four features, in batches of two: two batches in every stage.
class Data final : public kiln::DataModule {
 public:
  std::shared_ptr<kiln::DataLoader> train_dataloader() override { return Loader(); }
  std::shared_ptr<kiln::DataLoader> val_dataloader() override { return Loader(); }
  std::shared_ptr<kiln::DataLoader> test_dataloader() override { return Loader(); }
  std::shared_ptr<kiln::DataLoader> predict_dataloader() override { return Loader(); }

 private:
  static std::shared_ptr<kiln::DataLoader> Loader() {
    const at::Tensor inputs = at::arange(16, at::kFloat).reshape({4, 4}) / 16;
    return std::make_shared<kiln::TensorDataLoader>(inputs, inputs.sum(1, /*keepdim=*/true),
                                                    kiln::TensorDataLoaderOptions{.batch_size = 2});
  }
};

int Fail(const std::string& what, const absl::Status& status) {
  std::cerr << "hook_order: " << what << " failed: " << status << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--hooks") {
    for (const char* hook : kModuleHooks) std::cout << hook << "\n";
    for (const char* hook : kCallbackHooks) std::cout << "Callback." << hook << "\n";
    return 0;
  }
  // --manual: the same run under manual optimization (the training step zeroes, backs up and steps by hand).
  const bool manual = argc > 1 && std::string(argv[1]) == "--manual";
  HookedModule model;
  model.set_automatic_optimization(!manual);
  Data data;
  auto checkpoint = std::make_shared<kiln::ModelCheckpoint>();
  kiln::Trainer trainer({.accelerator = "cpu",
                         .devices = 1,
                         .max_epochs = 1,
                         .limit_train_batches = 2,
                         .limit_val_batches = 2,
                         .limit_test_batches = 2,
                         .limit_predict_batches = 2,
                         .callbacks = {std::make_shared<HookedCallback>(), checkpoint},
                         .logger = false,
                         .enable_progress_bar = false,
                         .enable_model_summary = false});
  Record("== fit");
  if (absl::Status status = trainer.fit(model, data); !status.ok()) return Fail("fit", status);
  Record("== validate");
  if (auto metrics = trainer.validate(model, data, checkpoint->best_model_path()); !metrics.ok()) {
    return Fail("validate", metrics.status());
  }
  Record("== test");
  if (auto metrics = trainer.test(model, data); !metrics.ok()) return Fail("test", metrics.status());
  Record("== predict");
  if (auto predictions = trainer.predict(model, data); !predictions.ok()) {
    return Fail("predict", predictions.status());
  }
  for (const std::string& call : Calls()) std::cout << call << "\n";
  return 0;
}
