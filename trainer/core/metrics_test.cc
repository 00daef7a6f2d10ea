#include "trainer/core/metrics.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "ATen/ATen.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(MetricCollectorTest, StepValuesAreTheLatestOfEachName) {
  MetricCollector metrics(/*training=*/true);
  for (int step = 0; step < 3; ++step) {
    metrics.Log("loss", at::scalar_tensor(1.5 * step), {}, 8);
    metrics.Log("lr", 0.1 * step, {}, 8);
  }
  const MetricMap values = metrics.StepMetrics();
  ASSERT_EQ(values.size(), 2u);
  EXPECT_DOUBLE_EQ(values.at("loss"), 3.0);
  EXPECT_DOUBLE_EQ(values.at("lr"), 0.1 * 2);
}

TEST(MetricCollectorTest, NamesInAnotherOrderKeepTheirOwnValues) {
  MetricCollector metrics(/*training=*/true);
  metrics.Log("a", at::scalar_tensor(1.0), {}, 1);
  metrics.Log("b", at::scalar_tensor(2.0), {}, 1);
  metrics.Log("c", at::scalar_tensor(3.0), {}, 1);
  // The next step logs them in reverse, and one more.
  metrics.Log("c", at::scalar_tensor(30.0), {}, 1);
  metrics.Log("d", at::scalar_tensor(40.0), {}, 1);
  metrics.Log("b", at::scalar_tensor(20.0), {}, 1);
  metrics.Log("a", at::scalar_tensor(10.0), {}, 1);
  EXPECT_EQ(metrics.StepMetrics(), (MetricMap{{"a", 10.0}, {"b", 20.0}, {"c", 30.0}, {"d", 40.0}}));
}

// Values are read in place on the host (and brought over in one copy per device, type and shape from other devices,
// which the virtual NPU's tests cover); each must still be its own value, whatever its type and shape.
TEST(MetricCollectorTest, ManyValuesOfMixedTypesAndShapesReadAsEachAlone) {
  MetricCollector metrics(/*training=*/true);
  MetricMap expected;
  for (int i = 0; i < 50; ++i) {
    const std::string name = "m" + std::to_string(i);
    at::Tensor value = i % 3 == 0   ? at::scalar_tensor(i * 0.25, at::kFloat)
                       : i % 3 == 1 ? at::full({1}, i * 0.5, at::kDouble)
                                    : at::scalar_tensor(i, at::kLong);
    expected[name] = value.item<double>();
    metrics.Log(name, value, {}, 4);
  }
  for (const at::ScalarType type : {at::kHalf, at::kBFloat16, at::kBool, at::kByte, at::kChar, at::kShort, at::kInt}) {
    const std::string name = std::string("type_") + c10::toString(type);
    const at::Tensor value = at::scalar_tensor(1, at::TensorOptions().dtype(type));
    expected[name] = 1.0;
    metrics.Log(name, value, {}, 4);
  }
  metrics.Log("half", at::scalar_tensor(0.5, at::kHalf), {}, 4);
  expected["half"] = 0.5;
  metrics.Log("number", 7.0, {}, 4);
  expected["number"] = 7.0;
  EXPECT_EQ(metrics.StepMetrics(), expected);
}

TEST(MetricCollectorTest, EpochValuesCombineByTheirReduceFx) {
  MetricCollector metrics(/*training=*/false);
  const std::vector<double> values = {3.0, -1.0, 7.5, 2.0};
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t batch_size = static_cast<int64_t>(i) + 1;  // Weights 1 to 4: only the mean uses them.
    metrics.Log("mean", values[i], {}, batch_size);
    metrics.Log("sum", at::scalar_tensor(values[i]), {.reduce_fx = Reduce::kSum}, batch_size);
    metrics.Log("max", values[i], {.reduce_fx = Reduce::kMax}, batch_size);
    metrics.Log("min", at::scalar_tensor(values[i]), {.reduce_fx = Reduce::kMin}, batch_size);
  }
  const MetricMap epoch = metrics.EpochMetrics();
  double weighted = 0;
  for (size_t i = 0; i < values.size(); ++i) weighted += values[i] * static_cast<double>(i + 1);
  EXPECT_DOUBLE_EQ(epoch.at("mean"), weighted / 10.0);
  EXPECT_DOUBLE_EQ(epoch.at("sum"), std::accumulate(values.begin(), values.end(), 0.0));
  EXPECT_DOUBLE_EQ(epoch.at("max"), *std::max_element(values.begin(), values.end()));
  EXPECT_DOUBLE_EQ(epoch.at("min"), *std::min_element(values.begin(), values.end()));
  metrics.ResetEpoch();
  metrics.Log("max", -5.0, {.reduce_fx = Reduce::kMax}, 1);
  EXPECT_DOUBLE_EQ(metrics.EpochMetrics().at("max"), -5.0) << "a new epoch starts from nothing";
  // One reduction per name.
  EXPECT_THROW(metrics.Log("max", 1.0, {.reduce_fx = Reduce::kSum}, 1), c10::ValueError);
  // Across processes, a max goes out as this process's max, for the processes' max (rank_agreement.h).
  metrics.Log("other", 4.0, {.sync_dist = true, .reduce_fx = Reduce::kMax}, 3);
  metrics.Log("other", 2.0, {.sync_dist = true, .reduce_fx = Reduce::kMax}, 3);
  const auto totals = metrics.SyncedEpochTotals();
  ASSERT_EQ(totals.count("other"), 1u);
  EXPECT_EQ(totals.at("other").weighted_sum, 4.0);
  EXPECT_EQ(totals.at("other").weight, 1.0);
  EXPECT_EQ(totals.at("other").reduce, Reduce::kMax);
}

TEST(MetricCollectorTest, StepAndEpochNamesFollowLightning) {
  MetricCollector metrics(/*training=*/true);
  metrics.Log("loss", at::scalar_tensor(2.0), {.on_epoch = true}, 1);
  metrics.Log("loss", at::scalar_tensor(4.0), {.on_epoch = true}, 3);
  metrics.Log("acc", 0.5, {.on_epoch = true}, 1);
  metrics.Log("acc", 1.0, {.on_epoch = true}, 3);
  EXPECT_EQ(metrics.StepMetrics(), (MetricMap{{"acc_step", 1.0}, {"loss_step", 4.0}}));
  // Means weighted by batch size: (2*1 + 4*3) / 4 and (0.5*1 + 1*3) / 4.
  EXPECT_EQ(metrics.EpochMetrics(), (MetricMap{{"acc_epoch", 0.875}, {"loss_epoch", 3.5}}));
}

TEST(MetricCollectorTest, ProgressBarKeepsItsValuesUntilTheEpochEnds) {
  MetricCollector metrics(/*training=*/true);
  metrics.Log("loss", at::scalar_tensor(2.0), {.prog_bar = true}, 1);
  metrics.Log("other", at::scalar_tensor(1.0), {}, 1);
  EXPECT_EQ(metrics.TakeStepMetrics(), (MetricMap{{"loss", 2.0}, {"other", 1.0}}));
  EXPECT_TRUE(metrics.StepMetrics().empty());
  EXPECT_EQ(metrics.ProgressBarMetrics(), (MetricMap{{"loss", 2.0}}));
  metrics.ResetEpoch();
  EXPECT_TRUE(metrics.ProgressBarMetrics().empty());
  // Named as the logs name them: a value logged on step and epoch is <name>_step in the bar too.
  metrics.Log("loss", at::scalar_tensor(3.0), {.prog_bar = true, .on_step = true, .on_epoch = true}, 1);
  EXPECT_EQ(metrics.ProgressBarMetrics(), (MetricMap{{"loss_epoch", 3.0}, {"loss_step", 3.0}}));
}

TEST(MetricCollectorTest, SyncedStepValuesAreOnlyThoseLoggedWithSyncDist) {
  MetricCollector metrics(/*training=*/true);
  EXPECT_FALSE(metrics.HasSyncedStepValues());
  metrics.Log("local", at::scalar_tensor(1.0), {}, 1);
  EXPECT_FALSE(metrics.HasSyncedStepValues());
  metrics.Log("global", at::scalar_tensor(2.0), {.sync_dist = true}, 1);
  EXPECT_TRUE(metrics.HasSyncedStepValues());
  EXPECT_EQ(metrics.SyncedStepValues(), (MetricMap{{"global", 2.0}}));
}

// TryLogStep (what LightningModule::log tries first) records what Log records, and leaves every call it does not
// take to Log: two collectors given the same steps, one through Log alone and one through TryLogStep first, read the
// same after every step, whatever the order of names, the options, or the values' shapes.
TEST(MetricCollectorTest, TheInlineStepPathRecordsWhatLogRecords) {
  for (const bool training : {true, false}) {
    MetricCollector slow(training);
    MetricCollector fast(training);
    int taken = 0;
    int refused = 0;
    const auto log = [&](std::string_view name, const at::Tensor& value, const LogOptions& options) {
      slow.Log(name, value, options, 4);
      if (fast.TryLogStep(name, value, options)) {
        ++taken;
      } else {
        ++refused;
        fast.Log(name, value, options, 4);
      }
    };
    for (int step = 0; step < 6; ++step) {
      const double x = 1.0 + step;
      log("loss", at::scalar_tensor(x), {});
      log("acc", at::scalar_tensor(x / 10), {.sync_dist = step % 2 == 0, .reduce_fx = Reduce::kMax});
      if (step >= 2) log("late", at::scalar_tensor(x * 3), {});  // A name first logged later: a new slot.
      log("both", at::scalar_tensor(x * 2), {.on_step = true, .on_epoch = true});
      log("shown", at::scalar_tensor(x * 5), {.prog_bar = true});
      log("weighted", at::scalar_tensor(x * 7), {.batch_size = 2});
      log("explicit", at::scalar_tensor(x * 11), {.on_step = true, .on_epoch = false});
      if (step == 4) log("loss_again", at::full({1, 1}, x), {});  // One element, another shape.
      // Logged twice in a step, out of order.
      if (step % 3 == 2) log("acc", at::scalar_tensor(-x), {.reduce_fx = Reduce::kMax});
      EXPECT_EQ(fast.StepMetrics(), slow.StepMetrics()) << "training " << training << ", step " << step;
      EXPECT_EQ(fast.SyncedStepValues(), slow.SyncedStepValues()) << "training " << training << ", step " << step;
      EXPECT_EQ(fast.SyncedStepReduces(), slow.SyncedStepReduces()) << "training " << training << ", step " << step;
      EXPECT_EQ(fast.ProgressBarMetrics(), slow.ProgressBarMetrics()) << "training " << training << ", step " << step;
      EXPECT_EQ(fast.EpochMetrics(), slow.EpochMetrics()) << "training " << training << ", step " << step;
    }
    EXPECT_THROW(fast.Log("matrix", at::ones({2, 2}), {}, 4), c10::Error);
    EXPECT_FALSE(fast.TryLogStep("matrix", at::ones({2, 2}), {}));  // Not a scalar: refused, for Log to report.
    if (training) {
      EXPECT_GE(taken, 10) << "the inline path took too few calls to be tested";
    } else {
      EXPECT_EQ(taken, 0) << "outside training, every value is an epoch value by default";
    }
    EXPECT_GE(refused, 20);
  }
}

// A step value is kept as logged, autograd history included; reading it neither needs nor records a graph.
TEST(MetricCollectorTest, ValuesThatRequireGradReadWithoutRecordingAGraph) {
  MetricCollector metrics(/*training=*/true);
  at::Tensor weight = at::full({2}, 3.0).set_requires_grad(true);
  at::Tensor loss = (weight * weight).sum();
  metrics.Log("loss", loss, {}, 1);
  metrics.Log("half", loss / 2, {}, 1);
  EXPECT_EQ(metrics.StepMetrics(), (MetricMap{{"half", 9.0}, {"loss", 18.0}}));
  loss.backward();  // The logged tensor is still the loss the step backpropagates.
  EXPECT_TRUE(at::allclose(weight.grad(), at::full({2}, 6.0)));
}

TEST(MetricCollectorTest, ValidationDefaultsToEpochValues) {
  MetricCollector metrics(/*training=*/false);
  metrics.Log("val_loss", at::scalar_tensor(1.0), {}, 2);
  metrics.Log("val_loss", at::scalar_tensor(4.0), {}, 1);
  EXPECT_TRUE(metrics.StepMetrics().empty());
  EXPECT_EQ(metrics.EpochMetrics(), (MetricMap{{"val_loss", 2.0}}));
}

}  // namespace
}  // namespace kiln
