// Each loop of trainer/loops/ run on its own, inside the trainer's entry-point set-up (the wrapper fit, validate,
// test and predict share) but without the loops above it: the optimizer step without an epoch, an epoch without
// fit, evaluation and prediction without a data module. What each computes is derived here independently.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ATen/ATen.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/schedulers/lr_scheduler.h"
#include "torch/optim/sgd.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/checkpoint/lightning/checkpoint_connector.h"
#include "trainer/core/callback.h"
#include "trainer/loops/automatic_optimization.h"
#include "trainer/loops/evaluation_loop.h"
#include "trainer/loops/fit_loop.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/prediction_loop.h"
#include "trainer/loops/preflight.h"
#include "trainer/loops/training_epoch_loop.h"
#include "trainer/optim/step_lr.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace kiln {

// A trainer's loops, run one at a time inside its entry-point set-up, through the trainer's internal entry
// (Trainer::RunLoopsInternal) and the loops' own methods.
class LoopTestPeer {
 public:
  static absl::Status Run(Trainer& trainer, Stage stage, LightningModule& model,
                          absl::FunctionRef<absl::Status(FitLoop&)> body) {
    return trainer.RunLoopsInternal(stage, model, body);
  }
  // configure_optimizers' result, with a fresh run's counters for it (as fit sets them).
  static void SetOptimizers(FitLoop& loops, OptimizerConfig config) {
    loops.context().optimizers = std::move(config);
    loops.Reset();
  }
  // Where the next epoch starts, as a restored checkpoint says.
  static void ResumeAt(FitLoop& loops, int64_t epoch, int64_t batch) {
    loops.load_state_dict(LoopProgress{.epoch = epoch, .batch_in_epoch = batch},
                          loops.epoch_loop().scheduler_progress().total);
  }
};

namespace {

using ::testing::ElementsAre;

// y = w . x + b on 2 features; records what the loops hand it.
class LinearModule : public LightningModule {
 public:
  LinearModule() : linear_(register_module("linear", torch::nn::Linear(2, 1))) {
    torch::NoGradGuard no_grad;
    linear_->weight.copy_(at::tensor({0.5f, -0.25f}).reshape({1, 2}));
    linear_->bias.fill_(0.125f);
  }
  at::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    trained.push_back(batch_idx);
    return (linear_->forward(batch.input).squeeze(1) - batch.target).pow(2).mean();
  }
  void validation_step(const Batch& batch, int64_t batch_idx) override {
    validated.push_back(batch_idx);
    grad_enabled_in_eval = grad_enabled_in_eval || at::GradMode::is_enabled();
    training_in_eval = training_in_eval || is_training();
    log("val_mean", batch.input.mean());
  }
  at::Tensor predict_step(const Batch& batch, int64_t batch_idx) override {
    return linear_->forward(batch.input).squeeze(1);
  }
  OptimizerConfig configure_optimizers() override {
    return OptimizerConfig(std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1)));
  }
  torch::nn::Linear& linear() { return linear_; }

  std::vector<int64_t> trained;
  std::vector<int64_t> validated;
  bool grad_enabled_in_eval = false;
  bool training_in_eval = false;

 private:
  torch::nn::Linear linear_;
};

// Records the hooks it is called with, in order.
class HookRecorder : public Callback {
 public:
  std::string state_key() const override { return "HookRecorder"; }
  void on_before_optimizer_step(Trainer&, LightningModule&, torch::optim::Optimizer&) override {
    hooks.push_back("on_before_optimizer_step");
  }
  void on_before_zero_grad(Trainer&, LightningModule&, torch::optim::Optimizer&) override {
    hooks.push_back("on_before_zero_grad");
  }
  void on_validation_batch_end(Trainer&, LightningModule&, const Batch&, int64_t batch_idx) override {
    hooks.push_back("on_validation_batch_end " + std::to_string(batch_idx));
  }
  void on_fit_start(Trainer&, LightningModule&) override { hooks.push_back("on_fit_start"); }
  void on_train_epoch_start(Trainer& trainer, LightningModule&) override {
    hooks.push_back("on_train_epoch_start " + std::to_string(trainer.current_epoch()));
    if (stop_at_epoch_start) trainer.set_should_stop();
  }
  std::vector<std::string> hooks;
  bool stop_at_epoch_start = false;
};

// A scheduler that counts its steps and leaves the learning rate alone.
class CountingScheduler : public torch::optim::LRScheduler {
 public:
  explicit CountingScheduler(torch::optim::Optimizer& optimizer) : LRScheduler(optimizer) {}
  int steps = 0;

 private:
  std::vector<double> get_lrs() override {
    ++steps;
    return get_current_lrs();
  }
};

TrainerOptions Options(std::shared_ptr<Callback> callback) {
  TrainerOptions options;
  options.logger = false;
  options.enable_checkpointing = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.max_epochs = 1;
  if (callback != nullptr) options.callbacks = {std::move(callback)};
  return testing::Quiet(std::move(options));
}

// `count` examples of 2 features: row i is (i, -i / 2), target i / 4.
std::shared_ptr<TensorDataLoader> Loader(int64_t count, int64_t batch_size) {
  const at::Tensor index = at::arange(count, at::kFloat);
  return std::make_shared<TensorDataLoader>(at::stack({index, index / -2}, 1), index / 4,
                                            TensorDataLoaderOptions{.batch_size = batch_size});
}

TEST(AutomaticOptimizationTest, ClipsStepsAndCountsOnceAndZeroGradDropsTheGradients) {
  auto recorder = std::make_shared<HookRecorder>();
  TrainerOptions options = Options(recorder);
  options.gradient_clip_val = 0.5;
  Trainer trainer(options);
  LinearModule model;
  auto sgd = std::make_shared<torch::optim::SGD>(model.parameters(), torch::optim::SGDOptions(0.1));
  auto scheduler = std::make_shared<CountingScheduler>(*sgd);
  OptimizerConfig config(sgd);
  config.schedulers.push_back({.scheduler = scheduler, .interval = SchedulerConfig::Interval::kStep});

  // Gradients of a known loss, and the step they must give: the 2-norm clipped to 0.5, then SGD's p - 0.1 g.
  Batch batch = Loader(4, 4)->get_batch(0);
  model.training_step(batch, 0).backward();
  std::vector<at::Tensor> expected;
  double squares = 0;
  for (const at::Tensor& parameter : model.parameters()) squares += parameter.grad().pow(2).sum().item<double>();
  const double scale = std::min(1.0, 0.5 / (std::sqrt(squares) + 1e-6));
  ASSERT_LT(scale, 1.0) << "the test's gradients must be large enough to be clipped";
  for (const at::Tensor& parameter : model.parameters()) {
    expected.push_back(parameter.detach() - 0.1 * (parameter.grad() * scale));
  }

  std::vector<at::Tensor> stepped;
  std::vector<int64_t> scheduler_steps;
  absl::Status status = LoopTestPeer::Run(trainer, Stage::kFit, model, [&](FitLoop& loops) {
    LoopTestPeer::SetOptimizers(loops, config);
    AutomaticOptimization& optimization = loops.epoch_loop().automatic_optimization();
    absl::Status step = optimization.Step(model);
    for (const at::Tensor& parameter : model.parameters()) stepped.push_back(parameter.detach().clone());
    // The step leaves the (clipped) gradients; zero_grad, on the next window's first batch, drops them.
    for (const at::Tensor& parameter : model.parameters()) EXPECT_TRUE(parameter.grad().defined());
    optimization.ZeroGrad(model);
    scheduler_steps = loops.epoch_loop().scheduler_progress().total;
    return step;
  });
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<at::Tensor> parameters = model.parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(at::allclose(stepped[i], expected[i], /*rtol=*/1e-6, /*atol=*/1e-7)) << stepped[i];
    EXPECT_FALSE(parameters[i].grad().defined()) << "ZeroGrad drops the gradients (set_to_none)";
  }
  EXPECT_EQ(trainer.global_step(), 1);
  EXPECT_THAT(recorder->hooks, ElementsAre("on_before_optimizer_step", "on_before_zero_grad"));
  EXPECT_THAT(scheduler_steps, ElementsAre(1));
  EXPECT_EQ(scheduler->steps, 1) << "the step-interval scheduler stepped once";
}

TEST(EvaluationLoopTest, RunsTheLimitInEvalModeWithoutGradients) {
  auto recorder = std::make_shared<HookRecorder>();
  Trainer trainer(Options(recorder));
  LinearModule model;
  std::shared_ptr<TensorDataLoader> loader = Loader(10, 2);  // 5 batches; the first 3 run.
  absl::StatusOr<MetricMap> metrics = absl::UnknownError("not run");
  absl::Status status = LoopTestPeer::Run(trainer, Stage::kValidate, model, [&](FitLoop& loops) {
    metrics = EvaluationLoop(loops.context(), Stage::kValidate).Run(model, {loader.get()}, /*limits=*/{3});
    return metrics.status();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(model.validated, ElementsAre(0, 1, 2));
  EXPECT_FALSE(model.grad_enabled_in_eval);
  EXPECT_FALSE(model.training_in_eval);
  EXPECT_THAT(recorder->hooks,
              ElementsAre("on_validation_batch_end 0", "on_validation_batch_end 1", "on_validation_batch_end 2"));
  // Examples 0..5, features (i, -i/2): the mean over the batches, weighted by their sizes, is that of the 12 values.
  const double expected = (at::arange(6, at::kDouble).sum().item<double>() * 0.5) / 12;
  ASSERT_EQ(metrics->count("val_mean"), 1u);
  EXPECT_NEAR(metrics->at("val_mean"), expected, 1e-6);
  EXPECT_NEAR(trainer.callback_metrics().at("val_mean"), expected, 1e-6);
}

TEST(PredictionLoopTest, InterleavesShardsBackIntoTheDataOrder) {
  absl::StatusOr<at::Tensor> rows = InterleaveShards({at::tensor({0, 2, 4}), at::tensor({1, 3})});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(at::equal(*rows, at::arange(5, at::kLong)));
  absl::StatusOr<at::Tensor> broken = InterleaveShards({at::tensor({0}), at::tensor({1, 3, 5})});
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(broken.status().message()), ::testing::HasSubstr("set_shard's contract"));
}

// A data module of the given loaders (predict only here).
class PredictData : public DataModule {
 public:
  explicit PredictData(std::shared_ptr<DataLoader> loader) : loader_(std::move(loader)) {}
  std::shared_ptr<DataLoader> train_dataloader() override { return nullptr; }
  std::shared_ptr<DataLoader> predict_dataloader() override { return loader_; }

 private:
  std::shared_ptr<DataLoader> loader_;
};

TEST(PredictionLoopTest, PredictsTheLimitBatchByBatch) {
  TrainerOptions options = Options(nullptr);
  options.limit_predict_batches = 2;
  Trainer trainer(options);
  LinearModule model;
  PredictData data(Loader(6, 2));
  absl::StatusOr<std::vector<at::Tensor>> predictions = absl::UnknownError("not run");
  absl::Status status = LoopTestPeer::Run(trainer, Stage::kPredict, model, [&](FitLoop& loops) {
    predictions = PredictionLoop(loops.context()).Run(model, data, /*ckpt_path=*/"");
    return predictions.status();
  });
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(predictions->size(), 2u);
  // 0.5 x - 0.25 (-x / 2) + 0.125 = 0.625 x + 0.125 for examples 0..3.
  EXPECT_TRUE(at::allclose(at::cat(*predictions), at::arange(4, at::kFloat) * 0.625 + 0.125));
}

// An epoch of 5 training batches, validated (2 batches) after every 2 and not at its end.
TrainingLimits FiveBatchesValidatedEveryTwo() {
  return {.train_batches = 5,
          .val_batches = 2,
          .val_batches_per_loader = {2},
          .val_check_batch = 2,
          .val_at_epoch_end = false};
}

TEST(TrainingEpochLoopTest, AccumulatesValidatesAndResumesMidEpoch) {
  auto recorder = std::make_shared<HookRecorder>();
  TrainerOptions options = Options(recorder);
  options.accumulate_grad_batches = 2;
  Trainer trainer(options);
  LinearModule model;
  std::shared_ptr<TensorDataLoader> train = Loader(10, 2);  // 5 batches.
  std::shared_ptr<TensorDataLoader> val = Loader(2, 1);     // 2 batches.
  const TrainingLimits limits = FiveBatchesValidatedEveryTwo();
  absl::Status status = LoopTestPeer::Run(trainer, Stage::kFit, model, [&](FitLoop& loops) {
    LoopTestPeer::SetOptimizers(loops, model.configure_optimizers());
    return loops.epoch_loop().Run(model, limits, *train, {val.get()});
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(model.trained, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(trainer.global_step(), 3) << "steps after batches 2 and 4 and the epoch's last";
  EXPECT_THAT(model.validated, ElementsAre(0, 1, 0, 1)) << "validation after training batches 2 and 4";

  // The same epoch resumed after batch 3, as a checkpoint written there says: batches 3 and 4 only.
  Trainer resumed(options);
  LinearModule again;
  status = LoopTestPeer::Run(resumed, Stage::kFit, again, [&](FitLoop& loops) {
    LoopTestPeer::SetOptimizers(loops, again.configure_optimizers());
    LoopTestPeer::ResumeAt(loops, /*epoch=*/0, /*batch=*/3);
    return loops.epoch_loop().Run(again, limits, *train, {val.get()});
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(again.trained, ElementsAre(3, 4));
  EXPECT_THAT(again.validated, ElementsAre(0, 1)) << "after training batch 4";
}

TEST(TrainingEpochLoopTest, OwnsTheCountersThatTheTrainerAndCheckpointsRead) {
  TrainerOptions options = Options(nullptr);
  options.accumulate_grad_batches = 2;
  Trainer trainer(options);
  LinearModule model;
  LoopProgress saved;
  absl::Status status = LoopTestPeer::Run(trainer, Stage::kFit, model, [&](FitLoop& loops) {
    LoopTestPeer::SetOptimizers(loops, model.configure_optimizers());
    // 5 training batches of 2 examples, 2 validation batches of 1.
    absl::Status ran =
        loops.epoch_loop().Run(model, FiveBatchesValidatedEveryTwo(), *Loader(10, 2), {Loader(2, 1).get()});
    saved = loops.state_dict();
    return ran;
  });
  ASSERT_TRUE(status.ok()) << status;
  // Steps after batches 1, 3 and the epoch's last; validation (2 batches) after batches 1 and 3.
  EXPECT_EQ(trainer.global_step(), 3);
  EXPECT_EQ(trainer.logged_step(), 3);
  EXPECT_EQ(trainer.current_epoch(), 0) << "the fit loop, not run here, moves to the next epoch";
  EXPECT_EQ(saved.epoch, 1) << "a checkpoint written after the epoch resumes in the next";
  EXPECT_EQ(saved.batch_in_epoch, 0);
  EXPECT_EQ(saved.global_step, 3);
  EXPECT_EQ(saved.current_epoch, 0);
  EXPECT_EQ(saved.batches_done, 5);
  EXPECT_EQ(saved.lightning.batches_total, 5);
  EXPECT_EQ(saved.lightning.batches_completed, 5);
  EXPECT_EQ(saved.lightning.batches_that_stepped, 3);
  EXPECT_EQ(saved.lightning.steps_in_epoch, 3);
  EXPECT_EQ(saved.lightning.scheduler_steps_in_epoch, 0);
  EXPECT_EQ(saved.lightning.val_batches_in_epoch, 4);
  EXPECT_EQ(saved.lightning.val_batches_last_run, 2);
  EXPECT_TRUE(saved.train_loader.isNone());

  // What a checkpoint restores, the loops hold again.
  Trainer resumed(options);
  LinearModule again;
  LoopProgress restored;
  status = LoopTestPeer::Run(resumed, Stage::kFit, again, [&](FitLoop& loops) {
    LoopTestPeer::SetOptimizers(loops, again.configure_optimizers());
    loops.load_state_dict(saved, /*scheduler_steps=*/{});
    restored = loops.state_dict();
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(resumed.current_epoch(), 1);
  EXPECT_EQ(resumed.global_step(), 3);
  EXPECT_EQ(restored.epoch, 1);
  EXPECT_EQ(restored.global_step, 3);
  EXPECT_EQ(restored.lightning.batches_total, 5);
  EXPECT_EQ(restored.lightning.val_batches_in_epoch, 4);
  EXPECT_EQ(restored.lightning.val_batches_last_run, 2);
}

TEST(FitLoopTest, ResolvesLimitsAsLightningDoes) {
  TrainerOptions options;
  options.limit_train_batches = 0.5;
  options.val_check_interval = 0.25;
  absl::StatusOr<TrainingLimits> limits = FitLoop::ResolveLimits(options, /*train_batches=*/10, /*val_batches=*/4);
  ASSERT_TRUE(limits.ok()) << limits.status();
  EXPECT_EQ(limits->train_batches, 5);
  EXPECT_EQ(limits->val_batches, 4);
  EXPECT_EQ(limits->val_check_batch, 1) << "a quarter of 5 batches, at least 1";
  EXPECT_TRUE(limits->val_at_epoch_end);

  options.limit_train_batches = 1.0;
  options.val_check_interval = 3;
  limits = FitLoop::ResolveLimits(options, /*train_batches=*/2, /*val_batches=*/4);
  EXPECT_EQ(limits.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(limits.status().message()), ::testing::HasSubstr("`val_check_interval` (3)"));
  limits = FitLoop::ResolveLimits(options, /*train_batches=*/2, /*val_batches=*/-1);
  ASSERT_TRUE(limits.ok()) << "without validation data the interval is not checked against the epoch";
  EXPECT_EQ(limits->val_check_batch, 3);
  EXPECT_FALSE(limits->val_at_epoch_end);
}

// A data module of one train loader.
class TrainData : public DataModule {
 public:
  std::shared_ptr<DataLoader> train_dataloader() override { return Loader(4, 2); }
};

TEST(FitLoopTest, AStopWaitsForTheMinimumEpochs) {
  auto recorder = std::make_shared<HookRecorder>();
  recorder->stop_at_epoch_start = true;
  TrainerOptions options = Options(recorder);
  options.max_epochs = 5;
  options.min_epochs = 2;
  Trainer trainer(options);
  LinearModule model;
  TrainData data;
  absl::Status status =
      LoopTestPeer::Run(trainer, Stage::kFit, model, [&](FitLoop& loops) { return loops.Run(model, data, ""); });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(recorder->hooks, ::testing::Contains("on_train_epoch_start 1"));
  EXPECT_THAT(recorder->hooks, ::testing::Not(::testing::Contains("on_train_epoch_start 2")));
  EXPECT_EQ(trainer.current_epoch(), 2);
  EXPECT_EQ(trainer.global_step(), 3) << "epoch 0 runs its 2 batches; epoch 1, where the minimum is met, stops after one";
}

TEST(PreflightTest, RefusesMonitorsThatCanNeverBeReadWhereTheyAreRead) {
  PreflightPlan runs;
  runs.dry_step_ran = true;
  runs.validation_metrics = {"val_mean"};
  runs.first_validation_step = 4;
  const MonitoredMetric checkpoint{.name = "val_mean", .option = "ModelCheckpoint(monitor='val_mean')"};
  EXPECT_TRUE(CheckMonitors(runs, {checkpoint}).ok());
  MonitoredMetric every_step = checkpoint;
  every_step.every_n_train_steps = 2;
  EXPECT_THAT(CheckMonitors(runs, {every_step}).message(),
              ::testing::HasSubstr("ModelCheckpoint(monitor='val_mean') reads 'val_mean', which validation logs, every "
                                   "2 optimizer step(s) from step 2, but validation first logs it after step 4"));
  every_step.every_n_train_steps = 4;
  EXPECT_TRUE(CheckMonitors(runs, {every_step}).ok()) << "read after validation has logged it";
  every_step.every_n_train_steps = 2;
  every_step.strict = false;
  EXPECT_TRUE(CheckMonitors(runs, {every_step}).ok()) << "a lenient reader skips what is not there";

  PreflightPlan never = runs;
  never.validation_never_runs = "limit_val_batches is 0: set it above 0";
  EXPECT_THAT(CheckMonitors(never, {checkpoint}).message(),
              ::testing::HasSubstr("monitors 'val_mean', which validation logs, but no validation runs in this fit: "
                                   "limit_val_batches is 0: set it above 0; or monitor a metric training logs"));
  const MonitoredMetric training{.name = "train_loss", .option = "EarlyStopping(monitor='train_loss')"};
  EXPECT_TRUE(CheckMonitors(never, {training}).ok()) << "what validation does not log is not validation's";

  PreflightPlan no_dry_step;
  no_dry_step.validation_never_runs = "there is no validation data";
  const MonitoredMetric named{.name = "val_loss", .option = "EarlyStopping(monitor='val_loss')"};
  EXPECT_THAT(CheckMonitors(no_dry_step, {named}).message(), ::testing::HasSubstr("a validation metric by its name"));
  EXPECT_TRUE(CheckMonitors(no_dry_step, {training}).ok());
}

TEST(PreflightTest, RefusesAMonitorTheModuleDeclaresItNeverLogs) {
  PreflightPlan plan;
  plan.declared_metrics = {"train_loss_epoch", "train_loss_step", "val_loss"};
  const MonitoredMetric typo{.name = "val_los", .option = "EarlyStopping(monitor='val_los')"};
  EXPECT_THAT(CheckMonitors(plan, {typo}).message(),
              ::testing::HasSubstr("EarlyStopping(monitor='val_los') monitors 'val_los', which this run never logs: "
                                   "the module logs train_loss_epoch, train_loss_step, val_loss (its "
                                   "logged_metric_names()); did you mean 'val_loss'?"));
  const MonitoredMetric declared{.name = "train_loss_epoch", .option = "EarlyStopping(monitor='train_loss_epoch')"};
  EXPECT_TRUE(CheckMonitors(plan, {declared}).ok());
  MonitoredMetric lenient = typo;
  lenient.strict = false;
  EXPECT_TRUE(CheckMonitors(plan, {lenient}).ok()) << "a lenient reader skips what is not there";
  PreflightPlan dry = plan;
  dry.dry_step_ran = true;
  dry.validation_metrics = {"val_los"};
  EXPECT_TRUE(CheckMonitors(dry, {typo}).ok()) << "what the dry step saw logged is logged, declared or not";
  PreflightPlan undeclared;
  const MonitoredMetric anything{.name = "anything", .option = "ModelCheckpoint(monitor='anything')"};
  EXPECT_TRUE(CheckMonitors(undeclared, {anything}).ok())
      << "a module that declares nothing has its names learnt as they are logged";
}

TEST(PreflightTest, RefusesAMilestoneTheRunNeverPassesWhileItTrains) {
  PreflightPlan plan;
  plan.run_epochs = 5;
  plan.run_epochs_bound = "max_epochs=5";
  plan.run_steps = 20;
  plan.run_steps_bound = "max_steps=20";
  const ScheduledMilestone decay{.setting = "StepLR(step_size=6)", .step = 6};
  EXPECT_THAT(CheckMilestones(plan, {decay}).message(),
              ::testing::HasSubstr("StepLR(step_size=6), stepped every 1 epoch (interval='epoch'), changes the rate "
                                   "after 6 epoch(s), but this fit trains 5 epoch(s) (max_epochs=5): the run ends "
                                   "before the schedule gets there; set it to at most 5, or train longer"));
  ScheduledMilestone at_the_end = decay;
  at_the_end.step = 5;
  EXPECT_TRUE(CheckMilestones(plan, {at_the_end}).ok())
      << "the decay after the last epoch is what the last checkpoint holds, for a longer run resumed from it";
  ScheduledMilestone every_other = decay;
  every_other.step = 3;
  every_other.frequency = 2;  // Stepped at the ends of epochs 2 and 4: its 3rd step would come after epoch 6.
  EXPECT_THAT(CheckMilestones(plan, {every_other}).message(), ::testing::HasSubstr("after 6 epoch(s)"));
  EXPECT_THAT(CheckMilestones(plan, {every_other}).message(), ::testing::HasSubstr("set it to at most 2"));
  ScheduledMilestone per_step{.setting = "SequentialLR(milestones[0]=21)", .step = 21, .per_step = true};
  EXPECT_THAT(CheckMilestones(plan, {per_step}).message(),
              ::testing::HasSubstr("changes the rate after 21 optimizer step(s), but this fit trains 20 optimizer "
                                   "step(s) (max_steps=20)"));
  per_step.step = 20;
  EXPECT_TRUE(CheckMilestones(plan, {per_step}).ok());
  PreflightPlan unbounded;
  EXPECT_TRUE(CheckMilestones(unbounded, {decay}).ok()) << "a run of unknown length is not checked";
}

// LinearModule that also logs a score whose name does not say it is a validation metric.
class ScoringModule : public LinearModule {
 public:
  void validation_step(const Batch& batch, int64_t batch_idx) override {
    LinearModule::validation_step(batch, batch_idx);
    log("score", batch.target.mean());
  }
};

// A data module of a train loader and a validation loader.
class TrainAndValData : public DataModule {
 public:
  std::shared_ptr<DataLoader> train_dataloader() override { return Loader(4, 2); }
  std::vector<std::shared_ptr<DataLoader>> val_dataloaders() override { return {Loader(4, 2)}; }
};

// Options for a fit whose plan is refused: a logger whose folder (under `root`) must not be made, a ModelCheckpoint
// monitoring `checkpoint`, and `recorder` to see that no hook ran.
TrainerOptions RefusedRunOptions(const std::string& root, std::shared_ptr<HookRecorder> recorder,
                                 ModelCheckpointOptions checkpoint) {
  TrainerOptions options = Options(std::move(recorder));
  options.logger = true;
  options.default_root_dir = root;
  options.max_epochs = 2;
  options.enable_checkpointing = true;
  options.callbacks.push_back(std::make_shared<ModelCheckpoint>(std::move(checkpoint)));
  return options;
}

// Two epochs with a ModelCheckpoint in `dirpath` that monitors val_mean, which LinearModule's validation logs.
TrainerOptions ValMeanCheckpointOptions(const std::string& dirpath) {
  TrainerOptions options = Options(nullptr);
  options.max_epochs = 2;
  options.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = dirpath,
                                                                                .monitor = "val_mean"})};
  options.enable_checkpointing = true;
  return options;
}

// What fit refusing a plan leaves: an InvalidArgument saying `expected`, no folder, no hook with side effects, no
// training.
void ExpectRefusedBeforeAnythingIsWritten(const absl::Status& status, const std::string& expected,
                                          const std::string& root, const HookRecorder& recorder,
                                          const LinearModule& model) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), ::testing::HasSubstr(expected));
  EXPECT_FALSE(std::filesystem::exists(root)) << "the run wrote into " << root;
  EXPECT_THAT(recorder.hooks, ::testing::Not(::testing::Contains("on_fit_start")));
  EXPECT_TRUE(model.trained.empty());
}

// The library gets the check as a Status from fit, before any hook with side effects and before any folder.
TEST(FitLoopTest, AMonitorValidationNeverLogsStopsFitBeforeAnythingIsWritten) {
  const std::string root = std::string(std::getenv("TEST_TMPDIR")) + "/preflight";
  for (const auto& [limit_val_batches, check_val_every_n_epoch, every_n_train_steps, expected] :
       std::vector<std::tuple<BatchLimit, int64_t, int64_t, std::string>>{
           {BatchLimit(0), 1, 0, "limit_val_batches is 0: set it above 0"},
           {BatchLimit(1.0), 3, 0,
            "'score', which validation logs, but no validation runs in this fit: check_val_every_n_epoch is 3, "
            "beyond max_epochs=2: set it to at most 2"},
           {BatchLimit(1.0), 1, 1,
            "'score', which validation logs, every 1 optimizer step(s) from step 1, but validation first logs it "
            "after step 2"},
       }) {
    SCOPED_TRACE(expected);
    auto recorder = std::make_shared<HookRecorder>();
    TrainerOptions options = RefusedRunOptions(
        root, recorder, ModelCheckpointOptions{.monitor = "score", .every_n_train_steps = every_n_train_steps});
    options.limit_val_batches = limit_val_batches;
    options.check_val_every_n_epoch = check_val_every_n_epoch;
    Trainer trainer(options);
    ScoringModule model;
    TrainAndValData data;
    ExpectRefusedBeforeAnythingIsWritten(trainer.fit(model, data), expected, root, *recorder, model);
    // Only the dry step, on the first batch.
    EXPECT_EQ(model.validated, std::vector<int64_t>{0});
  }
  // Validation that runs, read where it is there: fit trains, and no dry step was needed.
  Trainer trainer(ValMeanCheckpointOptions(root + "/ok"));
  LinearModule model;
  TrainAndValData data;
  const absl::Status status = trainer.fit(model, data);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(model.validated, (std::vector<int64_t>{0, 1, 0, 1})) << "two epochs' validation, no dry step";
}

// LinearModule that declares what it logs, and steps a schedule.
class DeclaringModule : public LinearModule {
 public:
  std::vector<std::string> logged_metric_names() const override { return {"val_mean"}; }
  OptimizerConfig configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    OptimizerConfig config(sgd);
    if (step_size > 0) config.schedulers.push_back({.scheduler = std::make_shared<StepLR>(*sgd, step_size, 0.5)});
    return config;
  }
  int64_t step_size = 0;
};

// Each mistake the library's fit finds before anything runs: a Status, no folder, no hook with side effects.
TEST(FitLoopTest, AMonitorNobodyLogsOrAScheduleThatNeverActsStopsFitBeforeAnythingIsWritten) {
  const std::string root = std::string(std::getenv("TEST_TMPDIR")) + "/preflight_declared";
  for (const auto& [monitor, step_size, expected] : std::vector<std::tuple<std::string, int64_t, std::string>>{
           {"val_men", 0, "ModelCheckpoint(monitor='val_men') monitors 'val_men', which this run never logs: the "
                          "module logs val_mean (its logged_metric_names()); did you mean 'val_mean'?"},
           {"val_mean", 3, "StepLR(step_size=3), stepped every 1 epoch (interval='epoch'), changes the rate after 3 "
                           "epoch(s), but this fit trains 2 epoch(s) (max_epochs=2)"},
       }) {
    SCOPED_TRACE(expected);
    auto recorder = std::make_shared<HookRecorder>();
    Trainer trainer(RefusedRunOptions(root, recorder, ModelCheckpointOptions{.monitor = monitor}));
    DeclaringModule model;
    model.step_size = step_size;
    TrainAndValData data;
    ExpectRefusedBeforeAnythingIsWritten(trainer.fit(model, data), expected, root, *recorder, model);
    EXPECT_TRUE(model.validated.empty()) << "the declaration is enough: no dry step";
  }
  // Declared and logged, and a decay the second epoch trains with: fit trains.
  Trainer trainer(ValMeanCheckpointOptions(root + "/ok"));
  DeclaringModule model;
  model.step_size = 1;
  TrainAndValData data;
  const absl::Status status = trainer.fit(model, data);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(model.validated, (std::vector<int64_t>{0, 1, 0, 1}));
}

}  // namespace
}  // namespace kiln
