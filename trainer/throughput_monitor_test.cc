// ThroughputMonitor and the arithmetic it logs (Throughput): the keys and steps Lightning's have, the rates from
// Lightning's formulas, the FLOPs FlopCounter counts for the built-in MLP, and MFU against the accelerator's peak.
// tests/lightning/throughput_test.sh compares the logged keys and steps with the real Lightning's.
#include "trainer/callbacks/throughput_monitor.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/testing/fake_accelerator.h"
#include "trainer/callbacks/throughput.h"
#include "trainer/core/logger.h"
#include "trainer/synthetic_data.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

using ::kiln::testing::Quiet;
using ::kiln::testing::RecordingClassifier;
using ::kiln::testing::SmallData;
using ::testing::HasSubstr;

// Lightning's Throughput.compute, worked by hand for three updates in a window of 3 on 2 devices: the window's
// first update marks its start, so the rates are (last - first) / (3 s); global rates are the device's times 2; each
// update's FLOPs count once per device, and the window's are all but the first update's.
TEST(ThroughputTest, RatesOverTheWindowAsLightningComputesThem) {
  Throughput throughput(/*available_flops=*/100.0, /*world_size=*/2, /*window_size=*/3);
  ASSERT_TRUE(throughput.Update(1.0, 1, 8, 80, 10.0).ok());
  ASSERT_TRUE(throughput.Update(2.0, 2, 16, 160, 10.0).ok());
  // Not yet a full window: the totals alone.
  EXPECT_EQ(throughput.Compute(), (MetricMap{{"time", 2.0}, {"batches", 2}, {"samples", 16}, {"lengths", 160}}));
  ASSERT_TRUE(throughput.Update(4.0, 3, 24, 240, 10.0).ok());
  const double elapsed = 4.0 - 1.0;
  const double device_flops_per_sec = (2 * 10.0 * 2 / 2) / elapsed;
  EXPECT_EQ(throughput.Compute(), (MetricMap{{"time", 4.0},
                                             {"batches", 3},
                                             {"samples", 24},
                                             {"lengths", 240},
                                             {"device/batches_per_sec", 2 / elapsed},
                                             {"device/samples_per_sec", 16 / elapsed},
                                             {"device/items_per_sec", 160 / elapsed},
                                             {"batches_per_sec", 2 * 2 / elapsed},
                                             {"samples_per_sec", 2 * 16 / elapsed},
                                             {"items_per_sec", 2 * 160 / elapsed},
                                             {"flops_per_sec", 2 * device_flops_per_sec},
                                             {"device/flops_per_sec", device_flops_per_sec},
                                             {"device/mfu", device_flops_per_sec / 100.0}}));
  // One device: no global rates; no peak: no MFU; another separator.
  Throughput one(std::nullopt, 1, 2, "|");
  ASSERT_TRUE(one.Update(1.0, 1, 4, std::nullopt, 6.0).ok());
  ASSERT_TRUE(one.Update(3.0, 2, 8, std::nullopt, 6.0).ok());
  EXPECT_EQ(one.Compute(), (MetricMap{{"time", 3.0},
                                      {"batches", 2},
                                      {"samples", 8},
                                      {"device|batches_per_sec", 0.5},
                                      {"device|samples_per_sec", 2.0},
                                      {"device|flops_per_sec", 3.0}}));
}

TEST(ThroughputTest, RefusesWhatLightningRefuses) {
  Throughput throughput(std::nullopt, 1, 3);
  ASSERT_TRUE(throughput.Update(1.0, 1, 8).ok());
  EXPECT_THAT(throughput.Update(1.0, 2, 16).message(), HasSubstr("expected the time to increase, last: 1"));
  EXPECT_THAT(throughput.Update(2.0, 3, 2).message(),
              HasSubstr("expected samples (2) to be greater or equal than batches (3)"));
  EXPECT_THAT(throughput.Update(2.0, 3, 24, 10).message(),
              HasSubstr("expected lengths (10) to be greater or equal than samples (24)"));
}

// The keys of every row the monitor logged, by step, per stage prefix.
std::map<int64_t, std::set<std::string>> KeysByStep(const MemoryLogger& logger, const std::string& prefix) {
  std::map<int64_t, std::set<std::string>> keys;
  for (const MemoryLogger::Row& row : logger.rows()) {
    for (const auto& [key, value] : row.metrics) {
      if (key.rfind(prefix, 0) == 0) keys[row.step].insert(key);
    }
  }
  return keys;
}

// The built-in MLP's FLOPs on one batch of `batch` examples: Linear(16, 64), Linear(64, 64), Linear(64, 4), each a
// matrix product of 2 x batch x in x out FLOPs forward; backward computes every weight's gradient (the same size)
// and every layer's input gradient but the first's.
constexpr int64_t kBatch = 64;
int64_t Layer(int64_t in, int64_t out) { return 2 * kBatch * in * out; }
const int64_t kForward = Layer(16, 64) + Layer(64, 64) + Layer(64, 4);
const int64_t kTrainingStep = 2 * kForward + Layer(64, 64) + Layer(64, 4);

TEST(ThroughputMonitorTest, LogsLightningsKeysAtTheLoggedStepsAndCountsTheModelsFlops) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());  // 10 training batches of 64, 4 validation batches.
  auto logger = std::make_shared<MemoryLogger>();
  auto monitor = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{
      .length_fn = [](const Batch& batch) { return batch.input.numel(); }, .window_size = 3});
  Trainer trainer(Quiet({.max_epochs = 2, .log_every_n_steps = 2, .callbacks = {monitor}, .loggers = {logger}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());

  EXPECT_EQ(monitor->flops_per_batch("train"), kTrainingStep);
  EXPECT_EQ(monitor->flops_per_batch("validate"), kForward);
  EXPECT_EQ(monitor->available_flops(), std::nullopt);  // The CPU declares no peak: no MFU.

  // Training: rows at the steps the loggers log (1, 3, 5, ...: every 2nd step, numbered from 0), the rates once the
  // window holds 3 batches (from step 3 on: training's window runs through the epochs, as Lightning's does).
  const std::set<std::string> totals = {"train/time", "train/batches", "train/samples", "train/lengths"};
  std::set<std::string> rates = totals;
  rates.insert({"train/device/batches_per_sec", "train/device/samples_per_sec", "train/device/items_per_sec",
                "train/device/flops_per_sec"});
  std::map<int64_t, std::set<std::string>> expected;
  for (int64_t step = 1; step < 20; step += 2) expected[step] = step == 1 ? totals : rates;
  EXPECT_EQ(KeysByStep(*logger, "train/"), expected);
  // Validation (not the sanity check): at its batches 2 and 4, the window full at 4; twice (once per epoch).
  std::map<int64_t, std::set<std::string>> validate = KeysByStep(*logger, "validate/");
  ASSERT_EQ(validate.size(), 2u);
  EXPECT_EQ(validate[2], (std::set<std::string>{"validate/time", "validate/batches", "validate/samples",
                                                "validate/lengths"}));
  EXPECT_EQ(validate[4].count("validate/device/flops_per_sec"), 1u);
  int validate_rows = 0;
  for (const MemoryLogger::Row& row : logger->rows()) {
    if (row.metrics.count("validate/batches")) {
      ++validate_rows;
      EXPECT_EQ(row.metrics.at("validate/batches"), static_cast<double>(row.step));
      EXPECT_EQ(row.metrics.at("validate/samples"), static_cast<double>(row.step * kBatch));
    }
    if (row.metrics.count("train/batches")) {
      // Training's totals run through the fit: the batch of the row's step is batch step + 1; 16 items an example.
      EXPECT_EQ(row.metrics.at("train/batches"), static_cast<double>(row.step + 1));
      EXPECT_EQ(row.metrics.at("train/lengths"), row.metrics.at("train/samples") * 16);
    }
  }
  EXPECT_EQ(validate_rows, 4);
}

// MFU is the device's FLOP/s over the peak the accelerator declares for the run's dtype (float32 for 32-true).
TEST(ThroughputMonitorTest, MfuIsFlopsPerSecondOverTheDeclaredPeak) {
  constexpr double kPeak = 5.0e11;
  auto accelerator = std::make_shared<::kiln::testing::FakeAccelerator>(::kiln::testing::FakeAcceleratorOptions{
      .name = "chip", .device_count = 1, .peak_flops = {{c10::kFloat, kPeak}, {c10::kBFloat16, 4 * kPeak}}});
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  auto logger = std::make_shared<MemoryLogger>();
  auto monitor = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{.window_size = 2});
  Trainer trainer(Quiet({.accelerator = accelerator,
                         .devices = 1,
                         .max_epochs = 1,
                         .limit_val_batches = 0,
                         .log_every_n_steps = 1,
                         .callbacks = {monitor},
                         .loggers = {logger}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(monitor->available_flops(), kPeak);
  int mfu_rows = 0;
  for (const MemoryLogger::Row& row : logger->rows()) {
    if (!row.metrics.count("train/device/mfu")) continue;
    ++mfu_rows;
    EXPECT_DOUBLE_EQ(row.metrics.at("train/device/mfu"), row.metrics.at("train/device/flops_per_sec") / kPeak);
    // With one batch per update, the window's FLOP/s is one batch's FLOPs over the window's time.
    EXPECT_GT(row.metrics.at("train/device/flops_per_sec"), 0);
  }
  EXPECT_EQ(mfu_rows, 9);  // Steps 1 to 9: the window of 2 is full from the second batch.
}

// The user's own figure wins over the accelerator's (and gives the CPU an MFU); a module that declares its
// flops_per_batch is taken at its word, as in Lightning.
class DeclaredFlops final : public RecordingClassifier {
 public:
  std::optional<int64_t> flops_per_batch() const override { return 1'000'000; }
};

TEST(ThroughputMonitorTest, TheUsersPeakAndTheModulesFlopsWin) {
  DeclaredFlops model;
  SyntheticClusters data(SmallData());
  auto logger = std::make_shared<MemoryLogger>();
  auto monitor =
      std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{.window_size = 10, .available_flops = 1e9});
  Trainer trainer(Quiet({.max_epochs = 1,
                         .limit_val_batches = 0,
                         .log_every_n_steps = 10,
                         .callbacks = {monitor},
                         .loggers = {logger}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(monitor->flops_per_batch("train"), std::nullopt);  // Nothing counted.
  // One row of the monitor's, at step 9 (the 10th batch: a full window).
  std::vector<MemoryLogger::Row> rows;
  for (const MemoryLogger::Row& row : logger->rows()) {
    if (row.metrics.count("train/time")) rows.push_back(row);
  }
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].step, 9);
  const MetricMap& row = rows[0].metrics;
  // The window's batches after its first, each 1e6 FLOPs, over the window's time: 1e6 x batches_per_sec.
  EXPECT_DOUBLE_EQ(row.at("train/device/flops_per_sec"), 1e6 * row.at("train/device/batches_per_sec"));
  EXPECT_DOUBLE_EQ(row.at("train/device/mfu"), row.at("train/device/flops_per_sec") / 1e9);
}

TEST(ThroughputMonitorTest, RefusesAWindowOfOneAndANonPositivePeak) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer small(Quiet({.callbacks = {std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{.window_size = 1})}}));
  EXPECT_THAT(small.fit(model, data).message(), HasSubstr("ThroughputMonitor(window_size=1)"));
  Trainer zero(Quiet({.callbacks = {std::make_shared<ThroughputMonitor>(
                          ThroughputMonitorOptions{.available_flops = 0.0})}}));
  EXPECT_THAT(zero.fit(model, data).message(), HasSubstr("ThroughputMonitor(available_flops=0)"));
}

}  // namespace
}  // namespace kiln
