// The module's side of the loops (issue #35): manual optimization (automatic_optimization() false, optimizers(),
// lr_schedulers(), manual_backward, toggle_optimizer) against automatic optimization on the same data, and the
// module's hooks that change what the loops do (the batch transfer hooks, on_train_batch_start's -1, the checkpoint
// hooks). Their order beside Lightning's is tests/lightning:hook_order_test's.
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/testing/fake_accelerator.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "torch/optim/schedulers/step_lr.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/plugins/precision/mixed_precision.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

using ::kiln::testing::Quiet;
using ::kiln::testing::SaveCheckpointAt;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

constexpr int64_t kBatches = 8;

// 64 examples of 6 features in 3 classes, batches of 8, the same every time.
class Data final : public DataModule {
 public:
  std::shared_ptr<DataLoader> train_dataloader() override {
    at::Generator generator = at::detail::createCPUGenerator(11);
    const at::Tensor inputs = at::randn({64, 6}, generator, at::kFloat);
    const at::Tensor targets = at::randint(0, 3, {64}, generator, at::kLong);
    return std::make_shared<TensorDataLoader>(inputs, targets, TensorDataLoaderOptions{.batch_size = 8});
  }
};

struct NetOptions {
  bool automatic = true;
  int64_t step_every = 1;            // Manual: step every this many batches (accumulating in between).
  bool two_optimizers = false;       // Manual: body and head each step with their own Adam, toggled.
  int64_t nan_at_batch = -1;         // The loss of this batch (in every epoch) is NaN.
};

// Linear(6, 8), tanh, Linear(8, 3), cross-entropy; Adam(0.01) with a StepLR(step_size 3, gamma 0.5) stepped after
// every optimizer step. Its initial weights depend on nothing but the seed it sets.
class Net : public LightningModule {
 public:
  explicit Net(NetOptions options = {}) : options_(options) {
    torch::manual_seed(7);
    body_ = register_module("body", torch::nn::Linear(6, 8));
    head_ = register_module("head", torch::nn::Linear(8, 3));
    set_automatic_optimization(options.automatic);
  }

  at::Tensor Loss(const Batch& batch, int64_t batch_idx) {
    at::Tensor loss = torch::nn::functional::cross_entropy(head_->forward(at::tanh(body_->forward(batch.input))),
                                                           batch.target);
    if (batch_idx == options_.nan_at_batch) loss = loss * std::numeric_limits<float>::quiet_NaN();
    return loss;
  }

  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    at::Tensor loss = Loss(batch, batch_idx);
    if (automatic_optimization()) return loss;
    std::vector<LightningOptimizer> optimizers = this->optimizers();
    std::vector<LightningScheduler> schedulers = lr_schedulers();
    if (options_.two_optimizers) {
      for (size_t i = 0; i < 2; ++i) {
        toggle_optimizer(optimizers[i]);
        optimizers[i].zero_grad();
        const std::vector<at::Tensor>& others = optimizers[1 - i].optimizer().param_groups()[0].params();
        std::vector<at::Tensor> grads_before;
        for (const at::Tensor& parameter : others) {
          grads_before.push_back(parameter.grad().defined() ? parameter.grad().clone() : at::Tensor());
        }
        manual_backward(Loss(batch, batch_idx));
        // The other optimizer's parameters were set not to take gradients: this backward left theirs alone.
        for (size_t j = 0; j < others.size(); ++j) {
          const at::Tensor& grad = others[j].grad();
          toggled_ok_ = toggled_ok_ && !others[j].requires_grad() && grad.defined() == grads_before[j].defined() &&
                        (!grad.defined() || grad.equal(grads_before[j]));
        }
        optimizers[i].step();
        untoggle_optimizer(optimizers[i]);
      }
      return loss;
    }
    const int64_t every = options_.step_every;
    if (batch_idx % every == 0) optimizers[0].zero_grad();
    manual_backward(every > 1 ? loss / every : loss);
    if ((batch_idx + 1) % every == 0) {
      optimizers[0].step();
      schedulers[0].step();
    }
    return loss;
  }

  OptimizerConfig configure_optimizers() override {
    OptimizerConfig config;
    if (options_.two_optimizers) {
      config.optimizers.push_back(std::make_shared<torch::optim::Adam>(body_->parameters(),
                                                                        torch::optim::AdamOptions(0.01)));
      config.optimizers.push_back(std::make_shared<torch::optim::Adam>(head_->parameters(),
                                                                        torch::optim::AdamOptions(0.01)));
      return config;
    }
    auto adam = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
    config.optimizers.push_back(adam);
    config.schedulers.push_back({.scheduler = std::make_shared<torch::optim::StepLR>(*adam, 3, 0.5),
                                 .interval = SchedulerConfig::Interval::kStep});
    return config;
  }

  at::Tensor Flat() {
    std::vector<at::Tensor> flat;
    for (const at::Tensor& parameter : parameters()) flat.push_back(parameter.detach().flatten());
    return at::cat(flat);
  }
  bool toggled_ok() const { return toggled_ok_; }

 private:
  NetOptions options_;
  torch::nn::Linear body_{nullptr};
  torch::nn::Linear head_{nullptr};
  bool toggled_ok_ = true;
};

TrainerOptions Options(TrainerOptions options) {
  options.enable_checkpointing = false;
  options.logger = false;
  options.enable_model_summary = false;
  return Quiet(options);
}

double LearningRate(const Trainer& trainer) {
  return trainer.optimizers()[0]->param_groups()[0].options().get_lr();
}

TEST(ManualOptimizationTest, ManualStepsTrainExactlyAsAutomaticOnes) {
  Data data;
  Net automatic;
  Trainer first(Options({.max_epochs = 2}));
  ASSERT_TRUE(first.fit(automatic, data).ok());
  Net manual({.automatic = false});
  Trainer second(Options({.max_epochs = 2}));
  absl::Status status = second.fit(manual, data);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(manual.Flat().equal(automatic.Flat())) << "the same steps on the same gradients, bit for bit";
  EXPECT_EQ(second.global_step(), 2 * kBatches);
  EXPECT_EQ(second.global_step(), first.global_step());
  EXPECT_EQ(LearningRate(second), LearningRate(first));
  EXPECT_EQ(LearningRate(second), 0.01 * std::pow(0.5, 2 * kBatches / 3)) << "the schedule the step stepped";
}

TEST(ManualOptimizationTest, AccumulatingInTheStepEqualsAccumulateGradBatches) {
  Data data;
  Net automatic;
  Trainer first(Options({.max_epochs = 1, .accumulate_grad_batches = 2}));
  ASSERT_TRUE(first.fit(automatic, data).ok());
  Net manual({.automatic = false, .step_every = 2});
  Trainer second(Options({.max_epochs = 1}));
  ASSERT_TRUE(second.fit(manual, data).ok());
  EXPECT_TRUE(manual.Flat().equal(automatic.Flat()));
  EXPECT_EQ(second.global_step(), kBatches / 2);
}

TEST(ManualOptimizationTest, TwoOptimizersCountTwoStepsAndToggleLeavesTheOtherAlone) {
  Data data;
  Net manual({.automatic = false, .two_optimizers = true});
  const at::Tensor before = manual.Flat();
  Trainer trainer(Options({.max_epochs = 1}));
  ASSERT_TRUE(trainer.fit(manual, data).ok());
  EXPECT_EQ(trainer.global_step(), 2 * kBatches) << "as Lightning, every optimizer step counts";
  EXPECT_TRUE(manual.toggled_ok());
  for (const at::Tensor& parameter : manual.parameters()) EXPECT_TRUE(parameter.requires_grad()) << "untoggled";
  EXPECT_FALSE(manual.Flat().equal(before));
}

TEST(ManualOptimizationTest, SeveralOptimizersUnderAutomaticOptimizationAreRefusedBeforeAnythingIsWritten) {
  // Lightning 2.x refuses them, naming manual optimization as the fix; nothing of the run is made.
  Data data;
  Net automatic({.automatic = true, .two_optimizers = true});
  const at::Tensor before = automatic.Flat();
  TrainerOptions options = Options({.max_epochs = 1});
  options.default_root_dir = TempDir() + "/refused";
  options.logger = true;
  options.enable_checkpointing = true;
  absl::Status status = Trainer(options).fit(automatic, data);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("configure_optimizers returned 2 optimizers, but training with several "
                                          "optimizers is only supported with manual optimization"));
  EXPECT_THAT(status.message(), HasSubstr("set_automatic_optimization(false)"));
  EXPECT_FALSE(std::filesystem::exists(options.default_root_dir)) << "the run wrote something";
  EXPECT_TRUE(automatic.Flat().equal(before));
}

TEST(ManualOptimizationTest, TheTrainersAccumulationAndClippingAreRefused) {
  Data data;
  Net accumulate({.automatic = false});
  absl::Status status = Trainer(Options({.max_epochs = 1, .accumulate_grad_batches = 2})).fit(accumulate, data);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("accumulate_grad_batches=2: automatic gradient accumulation is not "
                                          "supported for manual optimization"));
  Net clip({.automatic = false});
  status = Trainer(Options({.max_epochs = 1, .gradient_clip_val = 0.5})).fit(clip, data);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("call clip_gradients(optimizer, value, algorithm) in training_step"));
}

TEST(ManualOptimizationTest, ANonFiniteLossStopsOrSkipsTheBatch) {
  Data data;
  Net stopped({.automatic = false, .nan_at_batch = 3});
  absl::Status status = Trainer(Options({.max_epochs = 1})).fit(stopped, data);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("the training loss is nan at epoch 0, batch 3 (global step 3)"));

  Net skipped({.automatic = false, .nan_at_batch = 3});
  Trainer trainer(Options({.max_epochs = 1, .on_nonfinite_loss = "skip"}));
  ASSERT_TRUE(trainer.fit(skipped, data).ok());
  EXPECT_EQ(trainer.global_step(), kBatches - 1) << "batch 3 took no step";
  EXPECT_TRUE(skipped.Flat().isfinite().all().item<bool>());
}

TEST(ManualOptimizationTest, TheScalerWorksAsUnderAutomaticOptimization) {
  const auto options = [](std::shared_ptr<MixedPrecision> plugin) {
    kiln::testing::FakeAcceleratorOptions fake;
    fake.name = "fp16_chip";
    fake.precisions = {Precision::k32True, Precision::k16Mixed};
    TrainerOptions trainer = Options({.max_epochs = 1});
    trainer.accelerator = std::make_shared<kiln::testing::FakeAccelerator>(fake);
    trainer.devices = 1;
    trainer.precision_plugin = std::move(plugin);
    return trainer;
  };
  const auto plugin = [] {
    absl::StatusOr<std::unique_ptr<MixedPrecision>> made = MixedPrecision::Create(
        {.precision = Precision::k16Mixed, .autocast_dtype = at::kBFloat16, .scaler = {.growth_interval = 3}});
    EXPECT_TRUE(made.ok()) << made.status();
    return std::shared_ptr<MixedPrecision>(std::move(made).value());
  };
  Data data;
  std::shared_ptr<MixedPrecision> automatic_plugin = plugin();
  Net automatic;
  ASSERT_TRUE(Trainer(options(automatic_plugin)).fit(automatic, data).ok());
  std::shared_ptr<MixedPrecision> manual_plugin = plugin();
  Net manual({.automatic = false});
  absl::Status status = Trainer(options(manual_plugin)).fit(manual, data);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(manual.Flat().equal(automatic.Flat()));
  EXPECT_EQ(manual_plugin->state_dict(), automatic_plugin->state_dict()) << "the scale grew on the same steps";
  EXPECT_NE(manual_plugin->state_dict().at("scale"), 65536) << "it grew: the scaler took part";
}

TEST(ManualOptimizationTest, AResumedRunEndsExactlyAsTheStraightOne) {
  Data data;
  const std::string path = TempDir() + "/manual.ckpt";
  Net straight({.automatic = false});
  auto save = std::make_shared<SaveCheckpointAt>(0, 4, path);
  Trainer first(Options({.max_epochs = 2, .callbacks = {save}}));
  ASSERT_TRUE(first.fit(straight, data).ok());
  ASSERT_TRUE(save->saved.ok()) << save->saved;
  Net resumed({.automatic = false});
  Trainer second(Options({.max_epochs = 2}));
  absl::Status status = second.fit(resumed, data, path);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(resumed.Flat().equal(straight.Flat()));
  EXPECT_EQ(second.global_step(), first.global_step());
  EXPECT_EQ(LearningRate(second), LearningRate(first)) << "the schedule's manual steps were counted";
}

// The hooks that change what the loops do.
class Hooked : public Net {
 public:
  Batch on_before_batch_transfer(Batch batch, int64_t dataloader_idx) override {
    batch.input = batch.input * 2;
    return batch;
  }
  Batch transfer_batch_to_device(const Batch& batch, c10::Device device, int64_t dataloader_idx) override {
    devices.push_back(device);
    return Net::transfer_batch_to_device(batch, device, dataloader_idx);
  }
  Batch on_after_batch_transfer(Batch batch, int64_t dataloader_idx) override {
    batch.input = batch.input + 1;
    return batch;
  }
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    inputs.push_back(batch.input.clone());
    return Net::training_step(batch, batch_idx);
  }
  int on_train_batch_start(const Batch& batch, int64_t batch_idx) override { return batch_idx == stop_at ? -1 : 0; }
  void on_save_checkpoint(c10::impl::GenericDict& checkpoint) override {
    checkpoint.insert(save_key, at::full({2}, 3.5));
  }
  void on_load_checkpoint(const c10::impl::GenericDict& checkpoint) override {
    auto found = checkpoint.find(std::string("my_state"));
    if (found != checkpoint.end()) loaded = found->value().toTensor();
  }
  std::vector<c10::Device> devices;
  std::vector<at::Tensor> inputs;
  int64_t stop_at = -1;
  std::string save_key = "my_state";
  at::Tensor loaded;
};

TEST(ModuleHooksTest, TheTransferHooksShapeTheBatchTheStepGets) {
  Data data;
  Hooked model;
  Trainer trainer(Options({.max_epochs = 1, .limit_train_batches = 1}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  ASSERT_EQ(model.inputs.size(), 1u);
  const at::Tensor raw = data.train_dataloader()->get_batch(0).input;
  EXPECT_TRUE(model.inputs[0].equal(raw * 2 + 1));
  EXPECT_THAT(model.devices, ::testing::ElementsAre(c10::Device(c10::DeviceType::CPU)));
}

TEST(ModuleHooksTest, OnTrainBatchStartReturningMinusOneEndsTheEpoch) {
  Data data;
  Hooked model;
  model.stop_at = 3;
  Trainer trainer(Options({.max_epochs = 2}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(model.inputs.size(), 6u) << "batches 0-2 of each of the two epochs";
  EXPECT_EQ(trainer.global_step(), 6);
}

TEST(ModuleHooksTest, TheCheckpointHooksAddAndReadTheModulesEntries) {
  Data data;
  const std::string path = TempDir() + "/hooked.ckpt";
  Hooked model;
  auto save = std::make_shared<SaveCheckpointAt>(0, 2, path);
  Trainer trainer(Options({.max_epochs = 1, .callbacks = {save}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  ASSERT_TRUE(save->saved.ok()) << save->saved;
  absl::StatusOr<Checkpoint> written = ReadCheckpoint(path);
  ASSERT_TRUE(written.ok()) << written.status();
  auto entry = written->contents.find(std::string("my_state"));
  ASSERT_NE(entry, written->contents.end());
  EXPECT_TRUE(entry->value().toTensor().equal(at::full({2}, 3.5)));
  Hooked resumed;
  ASSERT_TRUE(Trainer(Options({.max_epochs = 1})).fit(resumed, data, path).ok());
  ASSERT_TRUE(resumed.loaded.defined());
  EXPECT_TRUE(resumed.loaded.equal(at::full({2}, 3.5)));

  Hooked clashing;
  clashing.save_key = "global_step";
  auto refused = std::make_shared<SaveCheckpointAt>(0, 2, path + ".2");
  ASSERT_TRUE(Trainer(Options({.max_epochs = 1, .callbacks = {refused}})).fit(clashing, data).ok());
  EXPECT_EQ(refused->saved.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path + ".2")) << "nothing written";
  EXPECT_THAT(refused->saved.message(),
              HasSubstr("on_save_checkpoint added the key 'global_step', which Kiln's checkpoint writes itself"));
}

}  // namespace
}  // namespace kiln
