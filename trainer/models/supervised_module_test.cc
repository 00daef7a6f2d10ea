#include "trainer/models/supervised_module.h"

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/CPUGeneratorImpl.h"
#include "gtest/gtest.h"
#include "torch/utils.h"
#include "trainer/data/tabular_data.h"
#include "trainer/models/conv_net.h"
#include "trainer/models/mlp.h"
#include "trainer/synthetic_data.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

TrainerOptions QuietOptions(int64_t epochs) {
  TrainerOptions options;
  options.accelerator = "cpu";
  options.devices = 1;
  options.max_epochs = epochs;
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.seed = 1;
  return options;
}

TEST(SupervisedModuleTest, MlpLearnsARegression) {
  // y = x0 - 2 x1 + noise: the model must learn the coefficients, not a constant.
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(3);
  CsvTable table;
  table.source = "linear";
  table.feature_names = {"x0", "x1"};
  table.features = at::randn({1000, 2}, generator);
  table.labels = table.features.select(1, 0) - 2 * table.features.select(1, 1) + 0.05 * at::randn({1000}, generator);
  auto data = TabularData::Create(table, {.task = Task::kRegression, .batch_size = 32, .normalize = false});
  ASSERT_TRUE(data.ok()) << data.status();
  torch::manual_seed(1);
  Mlp mlp({.input_size = 2, .hidden_sizes = {16}, .num_outputs = 1},
          {.task = Task::kRegression, .learning_rate = 1e-2});
  ASSERT_TRUE(mlp.CheckOutputShape(2, 1).ok());
  Trainer trainer(QuietOptions(15));
  ASSERT_TRUE(trainer.fit(mlp, **data).ok());
  const MetricMap& metrics = trainer.callback_metrics();
  ASSERT_TRUE(metrics.count("val_mae") && metrics.count("val_loss"));
  EXPECT_EQ(metrics.count("val_acc"), 0u);
  // Predicting the mean would give a mean absolute error near 0.8 * sqrt(5) = 1.8.
  EXPECT_LT(metrics.at("val_mae"), 0.2);
  // predict_step returns one value per example.
  absl::StatusOr<std::vector<at::Tensor>> predictions = trainer.predict(mlp, **data);
  ASSERT_TRUE(predictions.ok());
  EXPECT_EQ((*predictions)[0].dim(), 1);
}

TEST(SupervisedModuleTest, ConvNetLearnsTheSyntheticTaskAsImages) {
  SyntheticOptions synthetic;
  synthetic.num_train = 2048;
  synthetic.num_val = 512;
  SyntheticClusters data(synthetic);  // 16 features: 1 x 4 x 4 images.
  torch::manual_seed(1);
  ConvNet net({.input_shape = {1, 4, 4}, .channels = {8, 16}, .num_outputs = 4},
              {.learning_rate = 3e-3, .input_shape = {1, 4, 4}});
  Trainer trainer(QuietOptions(8));
  ASSERT_TRUE(trainer.fit(net, data).ok());
  EXPECT_GT(trainer.callback_metrics().at("val_acc"), 0.6);  // Chance is 0.25.
  absl::StatusOr<std::vector<at::Tensor>> predictions = trainer.predict(net, data);
  ASSERT_TRUE(predictions.ok());
  // Classification predictions are probabilities.
  EXPECT_TRUE(at::allclose((*predictions)[0].sum(1), at::ones({(*predictions)[0].size(0)})));
}

TEST(SupervisedModuleTest, CheckOutputShapeNamesTheMismatch) {
  Mlp four({.input_size = 3, .hidden_sizes = {}, .num_outputs = 4}, {});
  EXPECT_TRUE(four.CheckOutputShape(3, 4).ok());
  absl::Status wrong_classes = four.CheckOutputShape(3, 10);
  EXPECT_NE(wrong_classes.message().find("returns [1, 4] for one example, but classification with 10 classes"),
            std::string::npos)
      << wrong_classes;
  Mlp regression_four({.input_size = 3, .hidden_sizes = {}, .num_outputs = 4}, {.task = Task::kRegression});
  EXPECT_NE(regression_four.CheckOutputShape(3, 1).message().find("regression needs one value per example"),
            std::string::npos);
  absl::Status wrong_features = four.CheckOutputShape(5, 4);
  EXPECT_NE(wrong_features.message().find("the model fails on one example of 5 features"), std::string::npos)
      << wrong_features;
  EXPECT_TRUE(four.is_training());  // The check leaves the mode as it was.
}

// fit checks its monitors against logged_metric_names before a run, so the names must be exactly those a run's
// callbacks see: both tasks, from a real fit (the epoch counter aside).
std::set<std::string> Seen(const Trainer& trainer) {
  std::set<std::string> seen;
  for (const auto& [name, value] : trainer.callback_metrics()) {
    if (name != "epoch") seen.insert(name);
  }
  return seen;
}

std::set<std::string> Declared(const SupervisedModule& model) {
  const std::vector<std::string> names = model.logged_metric_names();
  return std::set<std::string>(names.begin(), names.end());
}

TEST(SupervisedModuleTest, LoggedMetricNamesAreTheMetricsAFitLogs) {
  TrainerOptions options = QuietOptions(1);
  options.logger = false;
  SyntheticOptions synthetic;
  synthetic.num_train = 64;
  synthetic.num_val = 32;
  SyntheticClusters classes(synthetic);
  Mlp classifier({.input_size = 16, .hidden_sizes = {4}, .num_outputs = 4}, {.task = Task::kClassification});
  Trainer classifying(options);
  const absl::Status classified = classifying.fit(classifier, classes);
  ASSERT_TRUE(classified.ok()) << classified;
  EXPECT_EQ(Seen(classifying), Declared(classifier)) << "classification";

  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(5);
  CsvTable table;
  table.source = "two";
  table.feature_names = {"x0", "x1"};
  table.features = at::randn({64, 2}, generator);
  table.labels = table.features.select(1, 1);
  auto values = TabularData::Create(table, {.task = Task::kRegression, .batch_size = 16});
  ASSERT_TRUE(values.ok()) << values.status();
  Mlp regression({.input_size = 2, .hidden_sizes = {4}, .num_outputs = 1}, {.task = Task::kRegression});
  Trainer regressing(options);
  const absl::Status regressed = regressing.fit(regression, **values);
  ASSERT_TRUE(regressed.ok()) << regressed;
  EXPECT_EQ(Seen(regressing), Declared(regression)) << "regression";
}

}  // namespace
}  // namespace kiln
