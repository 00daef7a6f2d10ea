// kiln::Tuner from a program: lr_find puts the module back exactly and follows Lightning's schedule and rules;
// scale_batch_size on the CPU grows as Lightning's does where nothing runs out of memory. Lightning itself is compared
// in tests/lightning/tuner_test.sh; out of memory on a device (the virtual NPU with a memory limit) and 2 processes in
// //tests/third_party:tuner_npu_test.
#include "trainer/tuner.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/CPUGeneratorImpl.h"
#include "gtest/gtest.h"
#include "torch/nn/functional/loss.h"
#include "torch/nn/modules/linear.h"
#include "torch/optim/adam.h"
#include "torch/optim/sgd.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

// An MLP whose learning rate is the attribute "lr".
class Net : public LightningModule, public TunableAttributes {
 public:
  explicit Net(bool two_optimizers = false) : two_optimizers_(two_optimizers) {
    torch::manual_seed(3);
    hidden_ = register_module("hidden", torch::nn::Linear(8, 16));
    out_ = register_module("out", torch::nn::Linear(16, 3));
  }
  at::Tensor training_step(const Batch& batch, int64_t) override {
    return torch::nn::functional::cross_entropy(out_->forward(hidden_->forward(batch.input).tanh()), batch.target);
  }
  OptimizerConfig configure_optimizers() override {
    OptimizerConfig config(std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(lr)));
    if (two_optimizers_) {
      config.optimizers.push_back(std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr)));
    }
    return config;
  }
  std::optional<double> get_attribute(std::string_view name) const override {
    if (name == "lr") return lr;
    return std::nullopt;
  }
  void set_attribute(std::string_view name, double value) override { lr = value; }

  double lr = 1e-3;

 private:
  bool two_optimizers_;
  torch::nn::Linear hidden_{nullptr};
  torch::nn::Linear out_{nullptr};
};

// `rows` examples of 3 classes, whose loaders take the attribute "batch_size".
class Rows : public DataModule, public TunableAttributes {
 public:
  explicit Rows(int64_t rows) {
    at::Generator generator = at::detail::createCPUGenerator(11);
    inputs_ = at::randn({rows, 8}, generator);
    targets_ = at::randint(0, 3, {rows}, generator);
  }
  std::shared_ptr<DataLoader> train_dataloader() override {
    ++loaders_made;
    return std::make_shared<TensorDataLoader>(inputs_, targets_, TensorDataLoaderOptions{.batch_size = batch_size});
  }
  std::optional<double> get_attribute(std::string_view name) const override {
    if (name == "batch_size") return static_cast<double>(batch_size);
    return std::nullopt;
  }
  void set_attribute(std::string_view name, double value) override { batch_size = static_cast<int64_t>(value); }

  int64_t batch_size = 16;
  int loaders_made = 0;

 private:
  at::Tensor inputs_;
  at::Tensor targets_;
};

TrainerOptions Options() { return testing::Quiet({.max_epochs = 1000, .seed = 5}); }

TEST(LrFind, PutsTheModuleAndTheGeneratorBackAndFollowsLightningsSchedule) {
  Net net;
  Rows rows(256);
  Trainer trainer(Options());
  const at::Tensor before = testing::FlatParameters(net).clone();
  const at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  net.eval();
  const LRFinderOptions options{.min_lr = 1e-6, .max_lr = 0.5, .num_training = 40};
  absl::StatusOr<std::optional<LRFinder>> found = Tuner(trainer).lr_find(net, rows, options);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  const LRFinder& result = **found;
  EXPECT_TRUE(at::equal(testing::FlatParameters(net), before)) << "lr_find must put the parameters back";
  EXPECT_TRUE(at::equal(at::detail::getDefaultCPUGenerator().get_state(), rng)) << "and the CPU generator";
  EXPECT_FALSE(net.is_training()) << "and the module's mode";
  ASSERT_EQ(result.lrs.size(), result.losses.size());
  ASSERT_GE(result.lrs.size(), 12u);
  EXPECT_LE(result.lrs.size(), 40u);
  // Lightning's _ExponentialLR: the base rate first, then base x (max / base)^((k + 1) / n) after its k-th step.
  EXPECT_EQ(result.lrs[0], 1e-6);
  for (size_t k = 1; k < result.lrs.size(); ++k) {
    EXPECT_EQ(result.lrs[k], 1e-6 * std::pow(0.5 / 1e-6, static_cast<double>(k + 1) / 40)) << k;
  }
  // update_attr: the attribute holds the suggestion.
  ASSERT_TRUE(result.suggestion().has_value());
  EXPECT_EQ(net.lr, *result.suggestion());
  // A fit after it trains from the parameters it started with.
  Trainer after(testing::Quiet({.max_epochs = 1}));
  EXPECT_TRUE(after.fit(net, rows).ok());
}

TEST(LrFind, LinearModeAndTheModulesSchedulersLeftOut) {
  Net net;
  Rows rows(256);
  Trainer trainer(Options());
  absl::StatusOr<std::optional<LRFinder>> found = Tuner(trainer).lr_find(
      net, rows, {.min_lr = 1e-4, .max_lr = 0.1, .num_training = 20, .mode = "linear",
                  .early_stop_threshold = std::nullopt, .update_attr = false});
  ASSERT_TRUE(found.ok()) << found.status();
  const LRFinder& result = **found;
  ASSERT_EQ(result.lrs.size(), 20u) << "no early stop: every step";
  EXPECT_EQ(result.lrs[0], 1e-4);
  for (size_t k = 1; k < 20; ++k) {
    EXPECT_EQ(result.lrs[k], 1e-4 + static_cast<double>(k + 1) / 20 * (0.1 - 1e-4)) << k;
  }
  EXPECT_EQ(net.lr, 1e-3) << "update_attr=false leaves the attribute";
}

TEST(LrFind, StopsWhereTheSmoothedLossDiverges) {
  Net net;
  Rows rows(256);
  Trainer trainer(Options());
  absl::StatusOr<std::optional<LRFinder>> found =
      Tuner(trainer).lr_find(net, rows, {.min_lr = 1e-3, .max_lr = 1e4, .num_training = 100, .update_attr = false});
  ASSERT_TRUE(found.ok()) << found.status();
  const std::vector<double>& losses = (*found)->losses;
  ASSERT_LT(losses.size(), 100u) << "a rate of 1e4 diverges before the end";
  // The last point is the first (after step 1) above 4 x the best before it.
  double best = losses[0];
  for (size_t i = 1; i + 1 < losses.size(); ++i) {
    EXPECT_FALSE(losses[i] > 4 * best) << "should have stopped at " << i;
    best = std::min(best, losses[i]);
  }
  EXPECT_TRUE(!std::isfinite(losses.back()) || losses.back() > 4 * best);
}

TEST(LrFind, SuggestionIsTheSteepestFallAfterTheSkippedPoints) {
  LRFinder finder;
  for (int i = 0; i < 20; ++i) {
    finder.lrs.push_back(i + 1);
    finder.losses.push_back(i <= 14 ? 10.0 : 5.0);  // One fall of 5 between points 14 and 15.
  }
  finder.losses[3] = 0.0;  // A steeper fall, but among the 10 points skipped at the start.
  // Central differences at 14 and 15 are both -2.5: the first is taken, as torch.argmin takes it.
  EXPECT_EQ(finder.optimal_index(), 14);
  EXPECT_EQ(finder.suggestion(), 15.0);
  finder.losses[14] = NAN;  // Not finite: left out, so the fall is between points 13 and 15.
  EXPECT_EQ(finder.optimal_index(), 13);
  EXPECT_FALSE(finder.suggestion(10, 0).has_value()) << "Python's [10:-0] is empty";
  EXPECT_FALSE(finder.suggestion(18, 1).has_value()) << "one point left";
}

TEST(LrFind, RefusesWhatLightningRefuses) {
  Rows rows(64);
  Trainer trainer(Options());
  // Two optimizers need manual optimization (with automatic optimization the fit itself refuses them first, as
  // Lightning's _validate_multiple_optimizers_support does); lr_find then refuses them, as Lightning's does.
  Net two(/*two_optimizers=*/true);
  two.set_automatic_optimization(false);
  absl::StatusOr<std::optional<LRFinder>> found = Tuner(trainer).lr_find(two, rows);
  EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(found.status().message().find("single optimizer"), std::string::npos) << found.status();
  Net net;
  found = Tuner(trainer).lr_find(net, rows, {.mode = "cubic"});
  EXPECT_NE(found.status().message().find("exponential, linear"), std::string::npos) << found.status();
  found = Tuner(trainer).lr_find(net, rows, {.attr_name = "learning_rate"});
  EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(found.status().message().find("'learning_rate'"), std::string::npos) << found.status();
}

TEST(LrFind, FindsTheRateInTheHyperparameters) {
  class HparamsNet : public Net {
   public:
    HparamsNet() { save_hyperparameters({{"learning_rate", "0.001"}}); }
  } net;
  Rows rows(256);
  Trainer trainer(Options());
  absl::StatusOr<std::optional<LRFinder>> found = Tuner(trainer).lr_find(net, rows, {.num_training = 30});
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE((*found)->suggestion().has_value());
  // "lr" is the module's attribute, found first (Lightning's order): the hparams are left alone.
  EXPECT_EQ(net.lr, *(*found)->suggestion());
  EXPECT_EQ(net.hparams().at("learning_rate"), "0.001");
}

// On the CPU nothing runs out of memory: Lightning's search doubles from init_val until the batch size before a
// doubling covers the training set (100 rows: 2, 4, ..., 64, then 128, which covers it), or max_trials ends it.
TEST(ScaleBatchSize, PowerOnTheCpuStopsAtTheTrainingSetOrMaxTrials) {
  Net net;
  Trainer trainer(Options());
  const at::Tensor before = testing::FlatParameters(net).clone();
  Rows rows(100);
  absl::StatusOr<std::optional<int64_t>> size = Tuner(trainer).scale_batch_size(net, rows);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(**size, 128);
  EXPECT_EQ(rows.batch_size, 128) << "the attribute is left at the result";
  EXPECT_TRUE(at::equal(testing::FlatParameters(net), before)) << "the trials' steps are undone";
  Rows more(1000);
  size = Tuner(trainer).scale_batch_size(net, more, {.init_val = 3, .max_trials = 4});
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(**size, 3 * 2 * 2 * 2) << "4 trials: 3, 6, 12, 24";
  Rows capped(100000);
  size = Tuner(trainer).scale_batch_size(net, capped, {.max_val = 40});
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(**size, 64) << "2 .. 32 run, 64 is at max_val's 40 or above and is not run, but is where it stands";
}

// As Lightning's lightning_getattr/setattr: a batch size kept in the module's hparams (as fit keeps --batch_size for
// hparams.yaml) and in the data module is read from the data module, whose loaders use it, and the result is written
// to both. Reading the hparams' copy would tune a number no loader uses: the search would never see the training
// set's size and would run on to max_val (the same 100 rows: 128, as above).
TEST(ScaleBatchSize, ReadsTheDataModulesBatchSizeAndWritesEveryHolder) {
  class HparamsNet : public Net {
   public:
    HparamsNet() { save_hyperparameters({{"batch_size", "64"}}); }
  } net;
  Trainer trainer(Options());
  Rows rows(100);
  absl::StatusOr<std::optional<int64_t>> size = Tuner(trainer).scale_batch_size(net, rows);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(**size, 128);
  EXPECT_EQ(rows.batch_size, 128);
  EXPECT_EQ(net.hparams().at("batch_size"), "128");
}

TEST(ScaleBatchSize, BinsearchOnTheCpuTakesTheMarginOff) {
  Net net;
  Trainer trainer(Options());
  Rows rows(100);
  absl::StatusOr<std::optional<int64_t>> size = Tuner(trainer).scale_batch_size(net, rows, {.mode = "binsearch"});
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(**size, static_cast<int64_t>(128 * (1 - 0.05))) << "128 covers the rows; then the 5% margin";
  EXPECT_EQ(rows.batch_size, **size);
}

TEST(ScaleBatchSize, RefusesBadValuesAndAMissingAttribute) {
  Net net;
  Rows rows(100);
  Trainer trainer(Options());
  absl::StatusOr<std::optional<int64_t>> size = Tuner(trainer).scale_batch_size(net, rows, {.mode = "triple"});
  EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(size.status().message().find("power, binsearch"), std::string::npos) << size.status();
  size = Tuner(trainer).scale_batch_size(net, rows, {.batch_arg_name = "bs"});
  EXPECT_NE(size.status().message().find("'bs'"), std::string::npos) << size.status();
  Trainer fast(testing::Quiet({.fast_dev_run = 1}));
  size = Tuner(fast).scale_batch_size(net, rows);
  ASSERT_TRUE(size.ok());
  EXPECT_FALSE(size->has_value()) << "skipped under fast_dev_run, as Lightning skips it";
}

}  // namespace
}  // namespace kiln
