#include "trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ATen/Context.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/registry.h"
#include "hal/testing/fake_accelerator.h"
#include "torch/nn/utils/clip_grad.h"
#include "torch/optim/schedulers/step_lr.h"
#include "torch/optim/sgd.h"
#include "torch/utils.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/classifier.h"
#include "trainer/core/logger.h"
#include "trainer/optim/fused_optimizers.h"
#include "trainer/optim/reduce_lr_on_plateau.h"
#include "trainer/strategies/strategy.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"

namespace kiln {
namespace {

using ::kiln::testing::Quiet;
using ::kiln::testing::RecordingClassifier;
using ::kiln::testing::SmallData;
using ::kiln::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

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
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.max_epochs = 2}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  // The sanity check validates 2 batches after on_fit_start, then each epoch validates before on_train_epoch_end.
  EXPECT_THAT(model.hooks, ElementsAre("on_fit_start", "on_validation_epoch_end", "on_train_epoch_start",
                                       "on_validation_epoch_end", "on_train_epoch_end", "on_train_epoch_start",
                                       "on_validation_epoch_end", "on_train_epoch_end", "on_fit_end"));
  EXPECT_EQ(model.training_steps, 20);
  EXPECT_EQ(model.validation_steps, 2 + 8);
}

// Records every Callback hook by name, and the step losses on_train_batch_end receives.
class HookRecorder final : public Callback {
 public:
  std::string state_key() const override { return "HookRecorder"; }
  void setup(Trainer&, LightningModule&, Stage) override { Add("setup"); }
  void teardown(Trainer&, LightningModule&, Stage) override { Add("teardown"); }
  void on_fit_start(Trainer&, LightningModule&) override { Add("on_fit_start"); }
  void on_fit_end(Trainer&, LightningModule&) override { Add("on_fit_end"); }
  void on_sanity_check_start(Trainer& t, LightningModule&) override {
    Add("on_sanity_check_start");
    EXPECT_TRUE(t.sanity_checking());
  }
  void on_sanity_check_end(Trainer&, LightningModule&) override { Add("on_sanity_check_end"); }
  void on_train_start(Trainer&, LightningModule&) override { Add("on_train_start"); }
  void on_train_end(Trainer&, LightningModule&) override { Add("on_train_end"); }
  void on_train_epoch_start(Trainer&, LightningModule&) override { Add("on_train_epoch_start"); }
  void on_train_epoch_end(Trainer&, LightningModule&) override { Add("on_train_epoch_end"); }
  void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override { Add("on_train_batch_start"); }
  void on_train_batch_end(Trainer&, LightningModule&, const at::Tensor& outputs, const Batch&, int64_t) override {
    Add("on_train_batch_end");
    outputs_.push_back(outputs);
  }
  void on_before_backward(Trainer&, LightningModule&, const at::Tensor& loss) override {
    Add("on_before_backward");
    EXPECT_TRUE(loss.requires_grad());
  }
  void on_after_backward(Trainer&, LightningModule&) override { Add("on_after_backward"); }
  void on_before_optimizer_step(Trainer&, LightningModule&, torch::optim::Optimizer&) override {
    Add("on_before_optimizer_step");
  }
  void on_before_zero_grad(Trainer&, LightningModule&, torch::optim::Optimizer&) override {
    Add("on_before_zero_grad");
  }
  void on_validation_start(Trainer&, LightningModule&) override { Add("on_validation_start"); }
  void on_validation_epoch_start(Trainer&, LightningModule&) override { Add("on_validation_epoch_start"); }
  void on_validation_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    Add("on_validation_batch_start");
  }
  void on_validation_batch_end(Trainer&, LightningModule&, const Batch&, int64_t) override {
    Add("on_validation_batch_end");
  }
  void on_validation_epoch_end(Trainer&, LightningModule&) override { Add("on_validation_epoch_end"); }
  void on_validation_end(Trainer&, LightningModule&) override { Add("on_validation_end"); }
  void on_test_start(Trainer&, LightningModule&) override { Add("on_test_start"); }
  void on_test_epoch_start(Trainer&, LightningModule&) override { Add("on_test_epoch_start"); }
  void on_test_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override { Add("on_test_batch_start"); }
  void on_test_batch_end(Trainer&, LightningModule&, const Batch&, int64_t) override { Add("on_test_batch_end"); }
  void on_test_epoch_end(Trainer&, LightningModule&) override { Add("on_test_epoch_end"); }
  void on_test_end(Trainer&, LightningModule&) override { Add("on_test_end"); }
  void on_predict_start(Trainer&, LightningModule&) override { Add("on_predict_start"); }
  void on_predict_epoch_start(Trainer&, LightningModule&) override { Add("on_predict_epoch_start"); }
  void on_predict_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override {
    Add("on_predict_batch_start");
  }
  void on_predict_batch_end(Trainer&, LightningModule&, const at::Tensor& outputs, const Batch& batch,
                            int64_t) override {
    Add("on_predict_batch_end");
    EXPECT_EQ(outputs.size(0), batch.size());
  }
  void on_predict_epoch_end(Trainer&, LightningModule&) override { Add("on_predict_epoch_end"); }
  void on_predict_end(Trainer&, LightningModule&) override { Add("on_predict_end"); }
  void on_exception(Trainer&, LightningModule&, const absl::Status& error) override {
    Add("on_exception");
    error_ = error;
  }

  std::vector<std::string> hooks;
  std::vector<at::Tensor> outputs_;
  absl::Status error_;

 private:
  void Add(const std::string& hook) { hooks.push_back(hook); }
};

// The order trainer/core/callback.h documents, written out from it for one epoch of two batches with one
// validation batch, a sanity check of one batch, then test and predict of one batch each.
TEST(TrainerTest, CallbackHooksRunInTheOrderCallbackHDocuments) {
  class LossRecorder : public RecordingClassifier {
   public:
    at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
      at::Tensor loss = RecordingClassifier::training_step(batch, batch_idx);
      losses.push_back(loss.detach().clone());
      return loss;
    }
    std::vector<at::Tensor> losses;
  };
  LossRecorder model;
  SyntheticClusters data(SmallData());
  auto recorder = std::make_shared<HookRecorder>();
  Trainer trainer(Quiet({.max_epochs = 1,
                         .limit_train_batches = 2,
                         .limit_val_batches = 1,
                         .limit_test_batches = 1,
                         .limit_predict_batches = 1,
                         .num_sanity_val_steps = 1,
                         .callbacks = {recorder}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  const std::vector<std::string> validation = {"on_validation_start",       "on_validation_epoch_start",
                                               "on_validation_batch_start", "on_validation_batch_end",
                                               "on_validation_epoch_end",   "on_validation_end"};
  const std::vector<std::string> batch = {"on_train_batch_start", "on_before_zero_grad",      "on_before_backward",
                                          "on_after_backward",    "on_before_optimizer_step", "on_train_batch_end"};
  std::vector<std::string> expected = {"setup", "on_fit_start", "on_sanity_check_start"};
  expected.insert(expected.end(), validation.begin(), validation.end());
  for (const char* hook : {"on_sanity_check_end", "on_train_start", "on_train_epoch_start"}) expected.push_back(hook);
  for (int i = 0; i < 2; ++i) expected.insert(expected.end(), batch.begin(), batch.end());
  expected.insert(expected.end(), validation.begin(), validation.end());
  for (const char* hook : {"on_train_epoch_end", "on_train_end", "on_fit_end", "teardown"}) expected.push_back(hook);
  EXPECT_THAT(recorder->hooks, ElementsAreArray(expected));
  // on_train_batch_end's outputs are training_step's losses, detached.
  ASSERT_EQ(recorder->outputs_.size(), 2u);
  ASSERT_EQ(model.losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_FALSE(recorder->outputs_[i].requires_grad());
    EXPECT_TRUE(at::equal(recorder->outputs_[i], model.losses[i]));
  }

  recorder->hooks.clear();
  ASSERT_TRUE(trainer.test(model, data).ok());
  EXPECT_THAT(recorder->hooks, ElementsAre("setup", "on_test_start", "on_test_epoch_start", "on_test_batch_start",
                                           "on_test_batch_end", "on_test_epoch_end", "on_test_end", "teardown"));
  recorder->hooks.clear();
  ASSERT_TRUE(trainer.predict(model, data).ok());
  EXPECT_THAT(recorder->hooks,
              ElementsAre("setup", "on_predict_start", "on_predict_epoch_start", "on_predict_batch_start",
                          "on_predict_batch_end", "on_predict_epoch_end", "on_predict_end", "teardown"));
}

TEST(TrainerTest, OnExceptionGetsTheErrorThatEndsTheRun) {
  RecordingClassifier model;
  model.throw_at_step = 3;
  SyntheticClusters data(SmallData());
  auto recorder = std::make_shared<HookRecorder>();
  Trainer trainer(Quiet({.max_epochs = 1, .callbacks = {recorder}}));
  const absl::Status status = trainer.fit(model, data);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("boom at step 3"));
  EXPECT_EQ(recorder->error_, status);
  EXPECT_EQ(std::count(recorder->hooks.begin(), recorder->hooks.end(), "on_exception"), 1);
  EXPECT_EQ(std::count(recorder->hooks.begin(), recorder->hooks.end(), "on_train_end"), 0);
}

struct LoopCase {
  std::string name;
  TrainerOptions options;
  int64_t expected_training_steps;    // training_step calls.
  int64_t expected_global_step;       // Optimizer steps.
  int64_t expected_validation_steps;  // validation_step calls, sanity check included.
};

TEST(TrainerTest, LoopOptionsChangeStepsAndValidations) {
  // SmallData: 10 training batches, 4 validation batches per epoch.
  const std::vector<LoopCase> cases = {
      {"epochs", {.max_epochs = 3, .num_sanity_val_steps = 0}, 30, 30, 12},
      {"max_steps inside epoch 0", {.max_epochs = 3, .max_steps = 7, .num_sanity_val_steps = 0}, 7, 7, 4},
      {"max_steps over epochs", {.max_epochs = 5, .max_steps = 25, .num_sanity_val_steps = 0}, 25, 25, 12},
      {"limit_train count", {.max_epochs = 2, .limit_train_batches = 3, .num_sanity_val_steps = 0}, 6, 6, 8},
      {"limit_train fraction", {.max_epochs = 2, .limit_train_batches = 0.5, .num_sanity_val_steps = 0}, 10, 10, 8},
      {"limit_val count", {.max_epochs = 2, .limit_val_batches = 1, .num_sanity_val_steps = 0}, 20, 20, 2},
      {"limit_val zero", {.max_epochs = 2, .limit_val_batches = 0.0}, 20, 20, 0},
      {"check_val_every_n_epoch",
       {.max_epochs = 4, .check_val_every_n_epoch = 2, .num_sanity_val_steps = 0},
       40,
       40,
       8},
      {"val_check_interval fraction",
       {.max_epochs = 1, .val_check_interval = 0.5, .num_sanity_val_steps = 0},
       10,
       10,
       8},
      {"val_check_interval count", {.max_epochs = 1, .val_check_interval = 3, .num_sanity_val_steps = 0}, 10, 10, 12},
      {"sanity default", {.max_epochs = 1}, 10, 10, 2 + 4},
      {"sanity all", {.max_epochs = 1, .num_sanity_val_steps = -1}, 10, 10, 4 + 4},
      {"accumulate", {.max_epochs = 2, .num_sanity_val_steps = 0, .accumulate_grad_batches = 3}, 20, 8, 8},
      {"fast_dev_run", {.max_epochs = 5, .fast_dev_run = 1}, 1, 1, 1},
      {"fast_dev_run 3", {.fast_dev_run = 3}, 3, 3, 3},
      {"overfit_batches", {.max_epochs = 2, .num_sanity_val_steps = 0, .overfit_batches = 2}, 4, 4, 4},
      {"zero epochs", {.max_epochs = 0}, 0, 0, 2},
  };
  for (const LoopCase& c : cases) {
    SCOPED_TRACE(c.name);
    RecordingClassifier model;
    SyntheticClusters data(SmallData());
    Trainer trainer(Quiet(c.options));
    absl::Status status = trainer.fit(model, data);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(model.training_steps, c.expected_training_steps);
    EXPECT_EQ(trainer.global_step(), c.expected_global_step);
    EXPECT_EQ(model.validation_steps, c.expected_validation_steps);
  }
}

// Lightning 2.2.5's CSVLogger, for 8 training batches per epoch, 2 epochs, log_every_n_steps=3, train_loss logged on
// step and epoch and val_loss on epoch, writes its rows at these steps and epochs (run on 2026-12-02, in this
// order): step rows at 2 and 5, the validation row and the epoch row at 7, then 8, 11, 14 and 15, 15.
TEST(TrainerTest, RowsAreNumberedAsLightningNumbersThemAndEachSaysItsEpoch) {
  SyntheticOptions data_options = SmallData();
  data_options.num_train = 8 * 64;
  SyntheticClusters data(data_options);
  RecordingClassifier model;
  auto memory = std::make_shared<MemoryLogger>();
  Trainer trainer(Quiet({.max_epochs = 2,
                         .num_sanity_val_steps = 0,
                         .log_every_n_steps = 3,
                         .loggers = {memory},
                         .enable_checkpointing = false}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  std::vector<std::pair<int64_t, double>> rows;
  for (const MemoryLogger::Row& row : memory->rows()) {
    ASSERT_TRUE(row.metrics.count("epoch")) << "a row at step " << row.step << " has no epoch";
    rows.emplace_back(row.step, row.metrics.at("epoch"));
  }
  EXPECT_THAT(rows, ElementsAre(std::pair<int64_t, double>{2, 0}, std::pair<int64_t, double>{5, 0},
                                std::pair<int64_t, double>{7, 0}, std::pair<int64_t, double>{7, 0},
                                std::pair<int64_t, double>{8, 1}, std::pair<int64_t, double>{11, 1},
                                std::pair<int64_t, double>{14, 1}, std::pair<int64_t, double>{15, 1},
                                std::pair<int64_t, double>{15, 1}));
  ASSERT_EQ(memory->rows().size(), 9u);
  EXPECT_TRUE(memory->rows()[2].metrics.count("val_loss")) << "validation comes before the epoch's row";
  EXPECT_TRUE(memory->rows()[3].metrics.count("train_loss_epoch"));
}

TEST(TrainerTest, FastDevRunWritesNoCheckpoints) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  TrainerOptions options = Quiet({.fast_dev_run = 1});
  Trainer trainer(options);
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_FALSE(std::filesystem::exists(options.default_root_dir + "/checkpoints"));
}

TEST(TrainerTest, AllGatherTextHandsBackEveryRanksTextAnEmptyOneToo) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.fast_dev_run = 1}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  ASSERT_NE(trainer.strategy(), nullptr);
  EXPECT_THAT(AllGatherText(*trainer.strategy(), "version_0"), ElementsAre("version_0"));
  // An empty text is a tensor without memory: nothing is copied into it (under --config=asan, UBSan refuses a copy
  // into its null pointer, as ModelCheckpoint's agreement on a folder once made one on the ranks that had none).
  EXPECT_THAT(AllGatherText(*trainer.strategy(), ""), ElementsAre(""));
}

TEST(TrainerTest, OverfitBatchesSeesTheSameBatchesEveryEpoch) {
  class Recorder : public RecordingClassifier {
   public:
    at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
      targets.push_back(batch.target.clone());
      return RecordingClassifier::training_step(batch, batch_idx);
    }
    std::vector<at::Tensor> targets;
  };
  Recorder model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.max_epochs = 2, .num_sanity_val_steps = 0, .overfit_batches = 2}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  ASSERT_EQ(model.targets.size(), 4u);
  EXPECT_TRUE(model.targets[0].equal(model.targets[2]));
  EXPECT_TRUE(model.targets[1].equal(model.targets[3]));
}

// Records the gradients the optimizer is about to apply.
class GradientProbe : public Callback {
 public:
  std::string state_key() const override { return "GradientProbe"; }
  void on_before_optimizer_step(Trainer& trainer, LightningModule& module,
                                torch::optim::Optimizer& optimizer) override {
    double squares = 0;
    double largest = 0;
    for (const at::Tensor& parameter : module.parameters()) {
      if (!parameter.grad().defined()) continue;
      squares += parameter.grad().pow(2).sum().item<double>();
      largest = std::max(largest, parameter.grad().abs().max().item<double>());
    }
    norms.push_back(std::sqrt(squares));
    max_abs.push_back(largest);
  }
  std::vector<double> norms;
  std::vector<double> max_abs;
};

TEST(TrainerTest, GradientClippingByNormAndByValue) {
  for (const std::string algorithm : {"norm", "value"}) {
    SCOPED_TRACE(algorithm);
    auto unclipped = std::make_shared<GradientProbe>();
    {
      torch::manual_seed(3);
      RecordingClassifier model;
      SyntheticClusters data(SmallData());
      Trainer trainer(Quiet({.max_epochs = 1, .callbacks = {unclipped}}));
      ASSERT_TRUE(trainer.fit(model, data).ok());
    }
    // Clip at a third of the smallest unclipped value, so every step is clipped.
    const std::vector<double>& reference = algorithm == "norm" ? unclipped->norms : unclipped->max_abs;
    const double clip = *std::min_element(reference.begin(), reference.end()) / 3;
    // The gradients right after the module's configure_gradient_clipping (whose default clips with the Trainer's
    // gradient_clip_val and gradient_clip_algorithm), before the step.
    class ClippedProbe : public RecordingClassifier {
     public:
      void configure_gradient_clipping(torch::optim::Optimizer& optimizer, std::optional<double> value,
                                       std::optional<std::string> algorithm) override {
        RecordingClassifier::configure_gradient_clipping(optimizer, value, algorithm);
        probe.on_before_optimizer_step(*trainer(), *this, optimizer);
      }
      GradientProbe probe;
    };
    torch::manual_seed(3);
    ClippedProbe model;
    SyntheticClusters data(SmallData());
    Trainer trainer(Quiet({.max_epochs = 1, .gradient_clip_val = clip, .gradient_clip_algorithm = algorithm}));
    ASSERT_TRUE(trainer.fit(model, data).ok());
    const GradientProbe* clipped = &model.probe;
    ASSERT_EQ(clipped->norms.size(), 10u);
    for (size_t i = 0; i < clipped->norms.size(); ++i) {
      if (algorithm == "norm") {
        EXPECT_NEAR(clipped->norms[i], clip, 1e-4 * clip);
      } else {
        EXPECT_LE(clipped->max_abs[i], clip * (1 + 1e-6));
      }
    }
  }
}

// After backward, clips a copy of the gradients with LibTorch's clip_grad_norm_; after the step (which leaves the
// gradients as they were until the next window's zero_grad), compares the trainer's clipped gradients with it, bit
// for bit.
class ClipReference final : public Callback {
 public:
  explicit ClipReference(double clip) : clip_(clip) {}
  std::string state_key() const override { return "ClipReference"; }
  void on_after_backward(Trainer& trainer, LightningModule& module) override {
    copies_.clear();
    for (const at::Tensor& parameter : module.parameters()) {
      at::Tensor copy = parameter.detach().clone();
      copy.mutable_grad() = parameter.grad().clone();
      copies_.push_back(copy);
    }
    if (torch::nn::utils::clip_grad_norm_(copies_, clip_) > clip_) ++clipped_steps;
  }
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override {
    const std::vector<at::Tensor> parameters = module.parameters();
    ASSERT_EQ(parameters.size(), copies_.size());
    for (size_t i = 0; i < parameters.size(); ++i) {
      EXPECT_TRUE(parameters[i].grad().equal(copies_[i].grad())) << "parameter " << i << " at step " << steps;
    }
    ++steps;
  }
  int64_t steps = 0;
  int64_t clipped_steps = 0;  // Steps whose gradients' norm was above the clip.

 private:
  double clip_;
  std::vector<at::Tensor> copies_;
};

TEST(TrainerTest, ClippingByNormMatchesLibTorchsClipGradNormExactly) {
  auto reference = std::make_shared<ClipReference>(0.05);
  torch::manual_seed(3);
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.max_epochs = 1, .gradient_clip_val = 0.05, .callbacks = {reference}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(reference->steps, 10);
  EXPECT_EQ(reference->clipped_steps, 10) << "the clip must bite on every step for the comparison to mean anything";
}

TEST(TrainerTest, StepLrSchedulerPerEpochAndPerStep) {
  for (const auto interval : {SchedulerConfig::Interval::kEpoch, SchedulerConfig::Interval::kStep}) {
    RecordingClassifier model(MlpOptions{.learning_rate = 0.1});
    model.make_scheduler = [interval](torch::optim::Optimizer& optimizer) {
      return std::vector<SchedulerConfig>{
          {std::make_shared<torch::optim::StepLR>(optimizer, /*step_size=*/1, /*gamma=*/0.5), interval, 1}};
    };
    SyntheticClusters data(SmallData());
    Trainer trainer(Quiet({.max_epochs = 2}));
    ASSERT_TRUE(trainer.fit(model, data).ok());
    // The trainer must step the scheduler once per epoch (2) or once per optimizer step (20). The expected rate
    // comes from the same LibTorch StepLR stepped that often by hand (LibTorch's StepLR leaves its first step out).
    const int steps = interval == SchedulerConfig::Interval::kEpoch ? 2 : 20;
    at::Tensor weight = at::zeros({1}, at::TensorOptions().requires_grad(true));
    torch::optim::SGD reference_optimizer({weight}, torch::optim::SGDOptions(0.1));
    torch::optim::StepLR reference(reference_optimizer, 1, 0.5);
    for (int i = 0; i < steps; ++i) reference.step();
    const double expected = reference_optimizer.param_groups()[0].options().get_lr();
    EXPECT_LT(expected, 0.1);
    EXPECT_DOUBLE_EQ(trainer.optimizers()[0]->param_groups()[0].options().get_lr(), expected);
  }
}

// Records the monitored value at every validation end outside the sanity check.
class ValLossRecorder final : public Callback {
 public:
  std::string state_key() const override { return "ValLossRecorder"; }
  void on_validation_end(Trainer& trainer, LightningModule& module) override {
    if (!trainer.sanity_checking()) values.push_back(trainer.callback_metrics().at("val_loss"));
  }
  std::vector<double> values;
};

TEST(TrainerTest, PlateauSchedulerStepsOnTheMonitoredMetricAfterEachValidation) {
  for (const auto interval : {SchedulerConfig::Interval::kEpoch, SchedulerConfig::Interval::kStep}) {
    RecordingClassifier model(MlpOptions{.learning_rate = 0.1});
    // mode max on a falling loss: every validation after the first is a bad one.
    const ReduceLROnPlateauOptions settings{.mode = "max", .factor = 0.5, .patience = 1};
    model.make_scheduler = [&](torch::optim::Optimizer& optimizer) {
      SchedulerConfig config{std::make_shared<ReduceLROnPlateau>(optimizer, settings), interval, 1};
      config.monitor = "val_loss";
      return std::vector<SchedulerConfig>{config};
    };
    auto recorder = std::make_shared<ValLossRecorder>();
    SyntheticClusters data(SmallData());
    // With the step interval, validate after every step so that the monitored value is always there.
    TrainerOptions options = Quiet({.max_epochs = 4, .callbacks = {recorder}});
    if (interval == SchedulerConfig::Interval::kStep) {
      options.max_epochs = 1;
      options.val_check_interval = BatchLimit(int64_t{1});
    }
    Trainer trainer(options);
    ASSERT_TRUE(trainer.fit(model, data).ok());
    // The expected rate: the same scheduler stepped by hand with the values the run validated to.
    at::Tensor weight = at::zeros({1}, at::TensorOptions().requires_grad(true));
    torch::optim::SGD reference_optimizer({weight}, torch::optim::SGDOptions(0.1));
    ReduceLROnPlateau reference(reference_optimizer, settings);
    ASSERT_GE(recorder->values.size(), 4u);
    for (double value : recorder->values) reference.step(value);
    const double expected = reference_optimizer.param_groups()[0].options().get_lr();
    EXPECT_LT(expected, 0.1) << "the values never made the reference reduce: the test would show nothing";
    EXPECT_DOUBLE_EQ(trainer.optimizers()[0]->param_groups()[0].options().get_lr(), expected);
  }
}

TEST(TrainerTest, PlateauSchedulerNeedsAMonitorAndALoggedMetric) {
  SyntheticClusters data(SmallData());
  const auto fit = [&](const std::string& monitor, bool strict, double* lr = nullptr) {
    RecordingClassifier model(MlpOptions{.learning_rate = 0.1});
    model.make_scheduler = [&](torch::optim::Optimizer& optimizer) {
      SchedulerConfig config{std::make_shared<ReduceLROnPlateau>(optimizer, ReduceLROnPlateauOptions{.patience = 0})};
      config.monitor = monitor;
      config.strict = strict;
      return std::vector<SchedulerConfig>{config};
    };
    Trainer trainer(Quiet({.max_epochs = 2}));
    absl::Status status = trainer.fit(model, data);
    if (lr != nullptr) *lr = trainer.optimizers()[0]->param_groups()[0].options().get_lr();
    return status;
  };
  EXPECT_THAT(fit("", true).message(), HasSubstr("without a monitor; set its SchedulerConfig's monitor"));
  const absl::Status missing = fit("val_nope", true);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("ReduceLROnPlateau conditioned on metric 'val_nope', which is not"));
  EXPECT_THAT(missing.message(), HasSubstr("val_loss"));
  double lr = 0;
  EXPECT_TRUE(fit("val_nope", false, &lr).ok()) << "strict=false skips the step";
  EXPECT_EQ(lr, 0.1);
}

TEST(TrainerTest, EstimatedSteppingBatchesSpansTheRun) {
  // SmallData has 10 training batches an epoch; accumulating 3 steps on batches 3, 6, 9 and the last.
  for (const auto& [options, expected] : std::vector<std::pair<TrainerOptions, int64_t>>{
           {Quiet({.max_epochs = 3}), 30},
           {Quiet({.max_epochs = 3, .accumulate_grad_batches = 3}), 12},
           {Quiet({.max_epochs = 3, .max_steps = 25}), 25},
           {Quiet({.max_epochs = 3, .limit_train_batches = BatchLimit(int64_t{5})}), 15}}) {
    RecordingClassifier model;
    int64_t seen = -2;
    model.make_scheduler = [&](torch::optim::Optimizer&) {
      seen = model.estimated_stepping_batches();
      return std::vector<SchedulerConfig>{};
    };
    SyntheticClusters data(SmallData());
    Trainer trainer(options);
    ASSERT_TRUE(trainer.fit(model, data).ok());
    EXPECT_EQ(seen, expected);
    EXPECT_EQ(trainer.global_step(), expected) << "the estimate is the steps the run took";
  }
}

TEST(TrainerTest, TrainsOnAnUnregisteredAcceleratorInstance) {
  kiln::testing::FakeAcceleratorOptions options;
  options.name = "new_sota";
  options.device_count = 4;
  auto accelerator = std::make_shared<kiln::testing::FakeAccelerator>(options);
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer({.accelerator = accelerator,
                   .devices = "3,",
                   .max_epochs = 1,
                   .default_root_dir = TempDir(),
                   .enable_progress_bar = false});
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
      {{.accelerator = "cpu", .devices = 1, .num_nodes = 2}, "num_nodes=2 needs MASTER_ADDR and MASTER_PORT set"},
      {{.accelerator = "cpu", .devices = 2, .strategy = "deepspeed"},
       "You selected an invalid strategy name: `strategy='deepspeed'`"},
      {{.accelerator = "cpu", .devices = 1, .strategy = "ddp", .sharding_strategy = "NO_SHARD"},
       "are fsdp's options, but the strategy is 'ddp'"},
      {{.accelerator = "cpu", .devices = 1, .strategy = "fsdp", .sharding_strategy = "HALF_SHARD"},
       "sharding_strategy=HALF_SHARD is not valid; pass FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD"},
      {{.accelerator = "cpu", .devices = 1, .strategy = "fsdp", .auto_wrap_policy = "Linear;ReLU"},
       "auto_wrap_policy=Linear;ReLU is not valid; pass module type names separated by commas"},
      {{.accelerator = "cpu", .devices = 1, .precision = "16-true"},
       "precision '16-true' is not supported by the cpu accelerator"},
      {{.max_steps = -5}, "max_steps=-5 is not valid; pass an int >= -1 (-1: no limit)"},
      {{.max_epochs = -3}, "max_epochs=-3 is not valid; pass an int >= -1"},
      {{.min_epochs = -1}, "min_epochs=-1 is not valid"},
      {{.max_epochs = 1, .limit_train_batches = -1}, "limit_train_batches=-1 is not valid; pass an int number of batches >= 0"},
      {{.max_epochs = 1, .limit_train_batches = 1.5}, "limit_train_batches=1.5 is not valid"},
      {{.max_epochs = 1, .limit_val_batches = -2}, "limit_val_batches=-2 is not valid"},
      {{.max_epochs = 1, .val_check_interval = 11},
       "`val_check_interval` (11) must be less than or equal to the number of the training batches (10)"},
      {{.check_val_every_n_epoch = 0}, "check_val_every_n_epoch=0 is not valid"},
      {{.num_sanity_val_steps = -2}, "num_sanity_val_steps=-2 is not valid"},
      {{.accumulate_grad_batches = 0}, "accumulate_grad_batches=0 is not valid"},
      {{.gradient_clip_val = -1.0}, "gradient_clip_val=-1 is not valid"},
      {{.gradient_clip_algorithm = "l3"}, "gradient_clip_algorithm=l3 is not valid; pass norm or value"},
      {{.fast_dev_run = -1}, "fast_dev_run=-1 is not valid"},
      {{.max_time = absl::Seconds(-1)}, "max_time=-1s is not valid"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.message_part);
    RecordingClassifier model;
    SyntheticClusters data(SmallData());
    TrainerOptions options = c.options;
    if (options.accelerator.name() == "auto" && options.accelerator.instance() == nullptr) {
      options.accelerator = "cpu";
      options.devices = 1;
    }
    options.enable_progress_bar = false;
    options.default_root_dir = TempDir();
    Trainer trainer(options);
    absl::Status status = trainer.fit(model, data);
    EXPECT_THAT(status.message(), HasSubstr(c.message_part));
    EXPECT_EQ(model.training_steps, 0);
  }
}

TEST(TrainerTest, AnExceptionInAStepBecomesAStatusAndTheDeviceIsTornDown) {
  auto accelerator = std::make_shared<kiln::testing::FakeAccelerator>();
  RecordingClassifier model;
  model.throw_at_step = 3;
  SyntheticClusters data(SmallData());
  Trainer trainer({.accelerator = accelerator,
                   .devices = 1,
                   .max_epochs = 1,
                   .default_root_dir = TempDir(),
                   .enable_progress_bar = false});
  absl::Status status = trainer.fit(model, data);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("training_step raised: boom at step 3"));
  EXPECT_EQ(accelerator->teardown_calls(), 1);
}

// A logger that cannot write what it holds when it is finalized (a full disk, say).
class UnwritableLogger final : public Logger {
 public:
  std::string name() const override { return "unwritable"; }
  absl::Status log_metrics(const MetricMap&, int64_t) override { return absl::OkStatus(); }
  absl::Status log_hyperparams(const std::map<std::string, std::string>&) override { return absl::OkStatus(); }
  absl::Status finalize() override { return absl::ResourceExhaustedError("no space left on the device"); }
};

// What a logger could not write fails the run, after fit as after validate and test (it used to be only a warning
// there), naming the logger.
TEST(TrainerTest, ALoggerThatCannotFinalizeFailsEveryStage) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.max_epochs = 1, .loggers = {std::make_shared<UnwritableLogger>()}}));
  const absl::Status fitted = trainer.fit(model, data);
  EXPECT_EQ(fitted.code(), absl::StatusCode::kResourceExhausted) << fitted;
  EXPECT_THAT(fitted.message(), HasSubstr("logger 'unwritable': no space left on the device"));
  for (const auto& [stage, result] : {std::pair{"validate", trainer.validate(model, data)},
                                      std::pair{"test", trainer.test(model, data)}}) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted) << stage << ": " << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr("logger 'unwritable': no space left on the device")) << stage;
  }
}

TEST(TrainerTest, ValidateTestAndPredict) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.limit_test_batches = 2, .limit_predict_batches = 3}));
  absl::StatusOr<MetricMap> val = trainer.validate(model, data);
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ(val->count("val_loss"), 1u);
  EXPECT_EQ(model.validation_steps, 4);
  absl::StatusOr<MetricMap> test = trainer.test(model, data);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->count("test_loss"), 1u);
  EXPECT_EQ(model.test_steps, 2);

  absl::StatusOr<std::vector<at::Tensor>> predictions = trainer.predict(model, data);
  ASSERT_TRUE(predictions.ok()) << predictions.status();
  ASSERT_EQ(predictions->size(), 3u);
  EXPECT_EQ((*predictions)[0].sizes(), (std::vector<int64_t>{64, 4}));
  class TrainOnly : public DataModule {
   public:
    std::shared_ptr<DataLoader> train_dataloader() override { return nullptr; }
  };
  TrainOnly train_only;
  EXPECT_THAT(trainer.predict(model, train_only).status().message(), HasSubstr("predict needs a predict_dataloader"));
}

// Several loaders for a stage (Lightning's list of loaders): SmallData's validation set (4 batches) and a second,
// other set (2 batches).
class TwoEvaluationSets final : public DataModule {
 public:
  TwoEvaluationSets() : first_(SmallData()), second_(SecondSet()) {}
  static SyntheticOptions SecondSet() {
    SyntheticOptions options = SmallData();
    options.num_val = 128;
    options.seed = 7;
    return options;
  }
  std::shared_ptr<DataLoader> train_dataloader() override { return first_.train_dataloader(); }
  std::vector<std::shared_ptr<DataLoader>> val_dataloaders() override {
    return {first_.val_dataloader(), second_.val_dataloader()};
  }
  std::vector<std::shared_ptr<DataLoader>> test_dataloaders() override { return val_dataloaders(); }
  std::vector<std::shared_ptr<DataLoader>> predict_dataloaders() override { return val_dataloaders(); }
  SyntheticClusters first_;
  SyntheticClusters second_;
};

// The steps as a model that takes dataloader_idx sees them.
class LoaderIndexRecorder : public RecordingClassifier {
 public:
  void validation_step(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) override {
    seen.emplace_back(dataloader_idx, batch_idx);
    RecordingClassifier::validation_step(batch, batch_idx);
  }
  at::Tensor predict_step(const Batch& batch, int64_t batch_idx, int64_t dataloader_idx) override {
    predicted.emplace_back(dataloader_idx, batch_idx);
    return RecordingClassifier::predict_step(batch, batch_idx);
  }
  std::vector<std::pair<int64_t, int64_t>> seen;
  std::vector<std::pair<int64_t, int64_t>> predicted;
};

// A callback that takes dataloader_idx, and one written before several loaders (the four-argument form).
class LoaderIndexCallback : public Callback {
 public:
  std::string state_key() const override { return "LoaderIndexCallback"; }
  void on_validation_batch_start(Trainer&, LightningModule&, const Batch&, int64_t batch_idx,
                                 int64_t dataloader_idx) override {
    seen.emplace_back(dataloader_idx, batch_idx);
  }
  std::vector<std::pair<int64_t, int64_t>> seen;
};
class OldStyleCallback : public Callback {
 public:
  std::string state_key() const override { return "OldStyleCallback"; }
  void on_validation_batch_start(Trainer&, LightningModule&, const Batch&, int64_t) override { ++calls; }
  int calls = 0;
};

TEST(TrainerTest, SeveralEvaluationLoadersPassTheirIndexAndSuffixTheirMetrics) {
  LoaderIndexRecorder model;
  TwoEvaluationSets data;
  auto indexed = std::make_shared<LoaderIndexCallback>();
  auto old_style = std::make_shared<OldStyleCallback>();
  Trainer trainer(Quiet({.callbacks = {indexed, old_style}}));
  absl::StatusOr<MetricMap> val = trainer.validate(model, data);
  ASSERT_TRUE(val.ok()) << val.status();
  using Seen = std::vector<std::pair<int64_t, int64_t>>;
  const Seen expected = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}, {1, 1}};
  EXPECT_EQ(model.seen, expected) << "loader 0's batches, then loader 1's";
  EXPECT_EQ(indexed->seen, expected);
  EXPECT_EQ(old_style->calls, 6) << "a callback's four-argument hook still runs";
  EXPECT_EQ(val->count("val_loss"), 0u) << "with two loaders every step metric names its loader";
  ASSERT_EQ(val->count("val_loss/dataloader_idx_0"), 1u);
  ASSERT_EQ(val->count("val_loss/dataloader_idx_1"), 1u);
  ASSERT_EQ(val->count("val_acc/dataloader_idx_1"), 1u);

  // Each is what validating on that loader alone gives.
  SyntheticClusters first(SmallData());
  SyntheticClusters second(TwoEvaluationSets::SecondSet());
  absl::StatusOr<MetricMap> alone_first = Trainer(Quiet({})).validate(model, first);
  absl::StatusOr<MetricMap> alone_second = Trainer(Quiet({})).validate(model, second);
  ASSERT_TRUE(alone_first.ok() && alone_second.ok());
  EXPECT_EQ(val->at("val_loss/dataloader_idx_0"), alone_first->at("val_loss"));
  EXPECT_EQ(val->at("val_loss/dataloader_idx_1"), alone_second->at("val_loss"));
  EXPECT_NE(alone_first->at("val_loss"), alone_second->at("val_loss")) << "the two sets must differ to tell";

  absl::StatusOr<MetricMap> test = Trainer(Quiet({})).test(model, data);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->count("test_loss/dataloader_idx_1"), 1u);

  absl::StatusOr<std::vector<at::Tensor>> predictions = Trainer(Quiet({})).predict(model, data);
  ASSERT_TRUE(predictions.ok()) << predictions.status();
  EXPECT_EQ(predictions->size(), 6u) << "one tensor per batch, loader after loader";
  EXPECT_EQ(model.predicted, expected);
}

TEST(TrainerTest, FitValidatesOnEveryLoaderAndMonitorsASuffixedMetric) {
  LoaderIndexRecorder model;
  TwoEvaluationSets data;
  const std::string folder = TempDir();
  Trainer trainer(Quiet({.max_epochs = 2,
                         .num_sanity_val_steps = 1,
                         .callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
                             .dirpath = folder, .monitor = "val_loss/dataloader_idx_1", .save_top_k = 1})}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  // One sanity step per loader, then each epoch's validation over both.
  ASSERT_GE(model.seen.size(), 2u);
  EXPECT_EQ(model.seen[0], std::make_pair(int64_t{0}, int64_t{0}));
  EXPECT_EQ(model.seen[1], std::make_pair(int64_t{1}, int64_t{0}));
  EXPECT_EQ(model.seen.size(), 2u + 2 * 6);
  EXPECT_EQ(trainer.callback_metrics().count("val_loss/dataloader_idx_1"), 1u);
  int checkpoints = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) checkpoints += entry.path().extension() == ".ckpt";
  EXPECT_EQ(checkpoints, 1) << "ModelCheckpoint monitored val_loss/dataloader_idx_1";
}

// What a module sees of its run (issue #35, item 5): Lightning's self.current_epoch, global_step, device, trainer,
// log_dict and log(batch_size=...).
class RunViewRecorder : public RecordingClassifier {
 public:
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    seen.emplace_back(current_epoch(), global_step());
    devices.push_back(device());
    trainers.push_back(trainer());
    return RecordingClassifier::training_step(batch, batch_idx);
  }
  void validation_step(const Batch& batch, int64_t batch_idx) override {
    log_dict(std::map<std::string, double>{{"one", 1.0}, {"two", 2.0}});
    // 1 on the first batch, standing for 3 examples; 0 on the others, standing for 1 each.
    log("weighted", batch_idx == 0 ? 1.0 : 0.0, {.batch_size = batch_idx == 0 ? 3 : 1});
    RecordingClassifier::validation_step(batch, batch_idx);
  }
  std::vector<std::pair<int64_t, int64_t>> seen;
  std::vector<c10::Device> devices;
  std::vector<Trainer*> trainers;
};

TEST(TrainerTest, TheModuleSeesItsRun) {
  RunViewRecorder model;
  SyntheticClusters data(SmallData());  // 10 training batches, 4 validation batches.
  Trainer trainer(Quiet({.max_epochs = 2, .num_sanity_val_steps = 0}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  ASSERT_EQ(model.seen.size(), 20u);
  for (int64_t i = 0; i < 20; ++i) {
    EXPECT_EQ(model.seen[i], std::make_pair(i / 10, i)) << "batch " << i << ": the epoch, and the steps before it";
    EXPECT_EQ(model.trainers[i], &trainer);
    EXPECT_EQ(model.devices[i], c10::Device(c10::DeviceType::CPU));
  }
  EXPECT_EQ(trainer.callback_metrics().at("one"), 1.0);
  EXPECT_EQ(trainer.callback_metrics().at("two"), 2.0);
  // The epoch's mean weighs each value by its batch_size: (3 x 1 + 1 x 0 + 1 x 0 + 1 x 0) / (3 + 1 + 1 + 1).
  EXPECT_DOUBLE_EQ(trainer.callback_metrics().at("weighted"), 3.0 / 6.0);
  EXPECT_EQ(model.trainer(), nullptr) << "outside the entry points the module holds no trainer";
  EXPECT_EQ(model.current_epoch(), 0);
}

TEST(TrainerTest, DeterministicTurnsOnLibTorchDeterministicAlgorithms) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.max_epochs = 1, .deterministic = true}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  Trainer off(Quiet({.max_epochs = 1}));
  ASSERT_TRUE(off.fit(model, data).ok());
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
}

TEST(TrainerTest, SeedMakesRunsRepeatable) {
  const auto run = [](uint64_t seed) {
    Trainer trainer(Quiet({.max_epochs = 1, .seed = seed}));
    // The trainer seeds LibTorch before set-up; a model built inside on_fit_start would see that seed. Here the
    // seed decides the initial parameters of a model made right after a fit that only seeds.
    RecordingClassifier probe;
    SyntheticClusters data(SmallData());
    EXPECT_TRUE(trainer.fit(probe, data).ok());
    return at::randn({4});
  };
  EXPECT_TRUE(run(7).equal(run(7)));
  EXPECT_FALSE(run(7).equal(run(8)));
}

// Returns a NaN loss (or the loss times `factor`) at the given training batches (counted from 0 over the whole fit).
class NanAt : public RecordingClassifier {
 public:
  explicit NanAt(std::set<int64_t> batches, double factor = std::numeric_limits<double>::quiet_NaN())
      : batches_(std::move(batches)), factor_(factor) {}
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = RecordingClassifier::training_step(batch, batch_idx);
    return batches_.count(training_steps - 1) > 0 ? loss * factor_ : loss;
  }

 private:
  std::set<int64_t> batches_;
  double factor_;
};

TEST(TrainerTest, ANonFiniteLossStopsNamingTheBatch) {
  NanAt model({13});
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.max_epochs = 3}));
  const at::Tensor before = kiln::testing::FlatParameters(model);
  absl::Status status = trainer.fit(model, data);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("the training loss is nan at epoch 1, batch 3 (global step 13)"));
  EXPECT_EQ(trainer.global_step(), 13) << "nothing may be applied from the NaN batch";
  EXPECT_FALSE(kiln::testing::FlatParameters(model).isnan().any().item<bool>());
  EXPECT_FALSE(kiln::testing::FlatParameters(model).equal(before));
}

// NanAt with kiln::FusedAdam (Adam's options and learning rate), whose update the device can skip: on a device that
// computes on its own the trainer then checks the loss on the device and reads the flag only where it reads
// something anyway; on the CPU, which has computed the loss when training_step returns, it reads the loss every step.
// Both must end the same way.
class FusedNanAt : public NanAt {
 public:
  using NanAt::NanAt;
  OptimizerConfig configure_optimizers() override {
    return std::make_shared<FusedAdam>(parameters(), torch::optim::AdamOptions(MlpOptions{}.learning_rate));
  }
};

// The virtual NPU registers its device when chosen, and LibTorch's autograd engine takes the devices registered at
// the process's first backward pass only (hal/device_kit/device_kit.h): these tests train on the CPU before they train
// on it, so it is chosen here, before any test runs, as a program that uses both would.
const bool kVirtualNpuChosen = [] {
  absl::StatusOr<AcceleratorSpec> spec = AcceleratorRegistry::Default().Find("virtual_npu");
  return spec.ok() && spec->factory()->ParseDevices(1).ok();
}();

// Quiet's options on `accelerator` ("cpu", or the sample virtual NPU, a PrivateUse1 device linked through
// @kiln_backends, whose kernels run on the host but whose losses are device tensors).
TrainerOptions QuietOn(const std::string& accelerator, TrainerOptions options) {
  options = Quiet(std::move(options));
  options.accelerator = accelerator;
  options.devices = 1;
  return options;
}

// The parameters after `steps` clean steps of FusedNanAt's model: what a stop at that step must leave.
at::Tensor ParametersAfter(const std::string& accelerator, int64_t steps) {
  torch::manual_seed(0);
  FusedNanAt model(std::set<int64_t>{});
  SyntheticClusters data(SmallData());
  Trainer trainer(QuietOn(accelerator, {.max_steps = steps, .seed = 1}));
  EXPECT_TRUE(trainer.fit(model, data).ok());
  return kiln::testing::FlatParameters(model).to(at::kCPU);
}

TEST(TrainerTest, ANonFiniteLossFoundOnTheDeviceStopsAsOnTheHost) {
  ASSERT_TRUE(AcceleratorRegistry::Default().Find("virtual_npu").ok())
      << "virtual_npu is not linked: Kiln's WORKSPACE lists it in kiln_backends (//backends:linked); registered: "
      << AcceleratorRegistry::Default().NameList();
  ASSERT_TRUE(kVirtualNpuChosen) << "the virtual NPU could not be chosen before the tests ran";
  // 10 batches an epoch. On the CPU the host reads each loss and stops at the non-finite one (training step 14); on
  // the device it looks at the flag before epoch 1's validation, after its last batch (training step 20), and never
  // looked at the loss itself before then.
  for (const auto& [accelerator, steps_run] : {std::pair<std::string, int>{"cpu", 14}, {"virtual_npu", 20}}) {
    const at::Tensor clean = ParametersAfter(accelerator, 13);
    for (const double factor : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
      SCOPED_TRACE(absl::StrCat(accelerator, ", loss times ", factor));
      torch::manual_seed(0);
      FusedNanAt model({13}, factor);
      SyntheticClusters data(SmallData());
      Trainer trainer(QuietOn(accelerator, {.max_epochs = 3, .seed = 1}));
      const absl::Status status = trainer.fit(model, data);
      EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
      EXPECT_THAT(status.message(),
                  HasSubstr(absl::StrCat("the training loss is ", std::isnan(factor) ? "nan" : "inf",
                                         " at epoch 1, batch 3 (global step 13)")));
      EXPECT_EQ(trainer.global_step(), 13) << "nothing may be applied from the non-finite batch";
      EXPECT_TRUE(kiln::testing::FlatParameters(model).to(at::kCPU).equal(clean))
          << "the parameters must be those of the 13 steps before the non-finite batch, bit for bit";
      EXPECT_EQ(model.training_steps, steps_run);
    }
  }
}

TEST(TrainerTest, NoLogRowOrCheckpointHoldsAStepAfterANonFiniteLoss) {
  for (const std::string accelerator : {"cpu", "virtual_npu"}) {
    SCOPED_TRACE(accelerator);
    torch::manual_seed(0);
    FusedNanAt model({13});
    SyntheticClusters data(SmallData());
    auto logger = std::make_shared<MemoryLogger>();
    const std::string folder = kiln::testing::TempDir();
    Trainer trainer(QuietOn(accelerator, {.max_epochs = 3,
                                          .log_every_n_steps = 4,
                                          .seed = 1,
                                          .callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
                                              .dirpath = folder, .save_top_k = -1, .every_n_train_steps = 1})},
                                          .loggers = {logger}}));
    const absl::Status status = trainer.fit(model, data);
    EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
    EXPECT_THAT(status.message(), HasSubstr("the training loss is nan at epoch 1, batch 3 (global step 13)"));
    std::vector<int64_t> steps;
    for (const MemoryLogger::Row& row : logger->rows()) {
      steps.push_back(row.step);
      for (const auto& [name, value] : row.metrics) EXPECT_TRUE(std::isfinite(value)) << name << " at " << row.step;
    }
    // Rows at global steps 4, 8 and 12 (logged as steps 3, 7, 11, Lightning's numbering), and the end of epoch 0
    // (its validation's row and its training row, both at step 9); none at global step 16.
    EXPECT_THAT(steps, ::testing::ElementsAre(3, 7, 9, 9, 11));
    std::set<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) files.insert(entry.path().filename());
    EXPECT_TRUE(files.count("epoch=1-step=13.ckpt")) << "the last step before the NaN batch is saved";
    EXPECT_FALSE(files.count("epoch=1-step=14.ckpt")) << "the NaN batch's step is never saved";
    EXPECT_EQ(files.size(), 13u) << "one checkpoint per clean step, 1 to 13";
  }
}

TEST(TrainerTest, ANonFiniteLossCanBeSkipped) {
  {
    NanAt model({3, 17});
    SyntheticClusters data(SmallData());
    Trainer trainer(Quiet({.max_epochs = 2, .on_nonfinite_loss = "skip"}));
    ASSERT_TRUE(trainer.fit(model, data).ok());
    EXPECT_EQ(trainer.skipped_batches(), 2);
    EXPECT_EQ(trainer.global_step(), 18);
    EXPECT_FALSE(kiln::testing::FlatParameters(model).isnan().any().item<bool>());
  }
  {
    // With accumulation over 2 batches, the NaN batch's whole window (batches 2 and 3) is dropped.
    NanAt model({3});
    SyntheticClusters data(SmallData());
    Trainer trainer(Quiet({.max_epochs = 1, .accumulate_grad_batches = 2, .on_nonfinite_loss = "skip"}));
    ASSERT_TRUE(trainer.fit(model, data).ok());
    EXPECT_EQ(trainer.global_step(), 4);
    EXPECT_FALSE(kiln::testing::FlatParameters(model).isnan().any().item<bool>());
  }
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  EXPECT_THAT(Trainer(Quiet({.on_nonfinite_loss = "ignore"})).fit(model, data).message(),
              HasSubstr("on_nonfinite_loss=ignore is not valid; pass 'stop' or 'skip'"));
}

TEST(TrainerTest, LoggingOutsideAStepIsAnError) {
  MlpClassifier model(MlpOptions{});
  EXPECT_THROW(model.log("x", 1.0), c10::Error);
}

}  // namespace
}  // namespace kiln
