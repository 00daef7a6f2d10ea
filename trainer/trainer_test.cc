#include "trainer/trainer.h"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/testing/fake_accelerator.h"
#include "torch/nn/functional/loss.h"
#include "torch/utils.h"
#include "trainer/classifier.h"
#include "trainer/synthetic_data.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records the hooks the trainer calls, in order.
class RecordingClassifier : public LightningModule {
 public:
  explicit RecordingClassifier(const MlpOptions& options) : inner_(std::make_shared<MlpClassifier>(options)) {
    register_module("inner", inner_);
  }
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    ++training_steps;
    if (throw_at_step == training_steps) throw std::runtime_error("boom at step " + std::to_string(training_steps));
    at::Tensor loss = torch::nn::functional::cross_entropy(inner_->forward(batch.input), batch.target);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const Batch& batch, int64_t batch_idx) override {
    ++validation_steps;
    log("val_loss", torch::nn::functional::cross_entropy(inner_->forward(batch.input), batch.target));
  }
  OptimizerConfig configure_optimizers() override { return inner_->configure_optimizers(); }
  void on_fit_start() override { hooks.push_back("on_fit_start"); }
  void on_train_epoch_start() override { hooks.push_back("on_train_epoch_start"); }
  void on_validation_epoch_end() override { hooks.push_back("on_validation_epoch_end"); }
  void on_train_epoch_end() override { hooks.push_back("on_train_epoch_end"); }
  void on_fit_end() override { hooks.push_back("on_fit_end"); }

  std::vector<std::string> hooks;
  int64_t training_steps = 0;
  int64_t validation_steps = 0;
  int64_t throw_at_step = -1;

 private:
  std::shared_ptr<MlpClassifier> inner_;
};

SyntheticOptions SmallData() {
  SyntheticOptions options;
  options.num_train = 640;  // 10 batches of 64.
  options.num_val = 256;    // 4 batches.
  return options;
}

TrainerOptions Quiet(TrainerOptions options) {
  options.enable_progress_bar = false;
  options.accelerator = "cpu";
  options.devices = 1;
  return options;
}

TEST(TrainerTest, LearnsTheSyntheticTask) {
  torch::manual_seed(0);
  SyntheticOptions data_options;
  MlpClassifier model(MlpOptions{});
  SyntheticClusters data(data_options);
  Trainer trainer(Quiet({.max_epochs = 10, .seed = 1}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  // An untrained classifier over K classes has cross-entropy near ln(K) and accuracy near 1/K.
  const double chance_loss = std::log(static_cast<double>(data_options.num_classes));
  const double chance_acc = 1.0 / static_cast<double>(data_options.num_classes);
  EXPECT_LT(trainer.callback_metrics().at("val_loss"), 0.5 * chance_loss);
  EXPECT_GT(trainer.callback_metrics().at("val_acc"), 3 * chance_acc);
  EXPECT_EQ(trainer.current_epoch(), 10);
  EXPECT_EQ(trainer.global_step(), 10 * (data_options.num_train / data_options.batch_size));
  EXPECT_EQ(trainer.plan()->accelerator->name(), "cpu");
}

TEST(TrainerTest, HookOrderAndValidationCadence) {
  RecordingClassifier model(MlpOptions{});
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.max_epochs = 2}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_THAT(model.hooks, ElementsAre("on_fit_start", "on_train_epoch_start", "on_validation_epoch_end",
                                       "on_train_epoch_end", "on_train_epoch_start", "on_validation_epoch_end",
                                       "on_train_epoch_end", "on_fit_end"));
  EXPECT_EQ(model.training_steps, 20);
  EXPECT_EQ(model.validation_steps, 8);
}

struct LoopCase {
  TrainerOptions options;
  int64_t expected_steps;
  int64_t expected_validation_steps;
};

TEST(TrainerTest, LoopOptionsChangeStepsAndValidations) {
  const std::vector<LoopCase> cases = {
      {{.max_epochs = 3}, 30, 12},
      {{.max_epochs = 3, .max_steps = 7}, 7, 4},          // Stops inside epoch 0, which still validates.
      {{.max_epochs = 2, .limit_train_batches = 3}, 6, 8},
      {{.max_epochs = 2, .limit_train_batches = 0.5}, 10, 8},
      {{.max_epochs = 2, .limit_val_batches = 1}, 20, 2},
      {{.max_epochs = 2, .limit_val_batches = 0.0}, 20, 0},
      {{.max_epochs = 4, .check_val_every_n_epoch = 2}, 40, 8},
      {{.max_epochs = 0}, 0, 0},
  };
  for (const LoopCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "expected steps " << c.expected_steps);
    RecordingClassifier model(MlpOptions{});
    SyntheticClusters data(SmallData());
    Trainer trainer(Quiet(c.options));
    ASSERT_TRUE(trainer.fit(model, data).ok());
    EXPECT_EQ(model.training_steps, c.expected_steps);
    EXPECT_EQ(trainer.global_step(), c.expected_steps);
    EXPECT_EQ(model.validation_steps, c.expected_validation_steps);
  }
}

TEST(TrainerTest, TrainsOnAnUnregisteredAcceleratorInstance) {
  testing::FakeAcceleratorOptions options;
  options.name = "new_sota";
  options.device_count = 4;
  auto accelerator = std::make_shared<testing::FakeAccelerator>(options);
  RecordingClassifier model(MlpOptions{});
  SyntheticClusters data(SmallData());
  Trainer trainer({.accelerator = accelerator, .devices = "3,", .max_epochs = 1, .enable_progress_bar = false});
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(trainer.plan()->accelerator->name(), "new_sota");
  EXPECT_EQ(trainer.plan()->device_indices, std::vector<int>{3});
  EXPECT_EQ(accelerator->setup_calls(), 1);
  EXPECT_EQ(accelerator->teardown_calls(), 1);
  EXPECT_EQ(model.training_steps, 10);
}

struct ErrorCase {
  TrainerOptions options;
  std::string message_part;
};

TEST(TrainerTest, BadOptionsFailBeforeTraining) {
  const std::vector<ErrorCase> cases = {
      {{.accelerator = "tpu"}, "unknown accelerator 'tpu'"},
      {{.accelerator = "cpu", .devices = 2}, "strategy 'ddp' (2 processes) is not available in this build"},
      {{.accelerator = "cpu", .devices = 1, .precision = "bf16-mixed"}, "precision 'bf16-mixed' is not available"},
      {{.accelerator = "cpu", .devices = 1, .max_steps = -5}, "max_steps=-5 must be -1"},
      {{.accelerator = "cpu", .devices = 1, .max_epochs = 1, .limit_train_batches = -1},
       "limit_train_batches=-1 must be >= 0"},
      {{.accelerator = "cpu", .devices = 1, .max_epochs = 1, .limit_train_batches = 1.5},
       "limit_train_batches=1.5 must be a fraction"},
      {{.accelerator = "cpu", .devices = 1, .check_val_every_n_epoch = 0}, "check_val_every_n_epoch=0"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.message_part);
    RecordingClassifier model(MlpOptions{});
    SyntheticClusters data(SmallData());
    TrainerOptions options = c.options;
    options.enable_progress_bar = false;
    Trainer trainer(options);
    absl::Status status = trainer.fit(model, data);
    EXPECT_THAT(status.message(), HasSubstr(c.message_part));
    EXPECT_EQ(model.training_steps, 0);
  }
}

TEST(TrainerTest, AnExceptionInAStepBecomesAStatusAndTheDeviceIsTornDown) {
  auto accelerator = std::make_shared<testing::FakeAccelerator>();
  RecordingClassifier model(MlpOptions{});
  model.throw_at_step = 3;
  SyntheticClusters data(SmallData());
  Trainer trainer({.accelerator = accelerator, .devices = 1, .max_epochs = 1, .enable_progress_bar = false});
  absl::Status status = trainer.fit(model, data);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("training epoch raised: boom at step 3"));
  EXPECT_EQ(accelerator->teardown_calls(), 1);
}

TEST(TrainerTest, ValidateReturnsEpochMetrics) {
  MlpClassifier model(MlpOptions{});
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({}));
  absl::StatusOr<MetricMap> metrics = trainer.validate(model, data);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->count("val_loss"), 1u);
  EXPECT_EQ(metrics->count("val_acc"), 1u);
}

TEST(TrainerTest, LoggingOutsideAStepIsAnError) {
  MlpClassifier model(MlpOptions{});
  EXPECT_THROW(model.log("x", 1.0), c10::Error);
}

}  // namespace
}  // namespace kiln
