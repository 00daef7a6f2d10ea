// End-to-end tests of the built-in callbacks and of exact resumption, through the public Trainer API.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hal/testing/fake_accelerator.h"
#include "torch/utils.h"
#include "trainer/callbacks/device_stats_monitor.h"
#include "trainer/callbacks/early_stopping.h"
#include "trainer/callbacks/learning_rate_monitor.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/callbacks/timer.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/core/logger.h"
#include "trainer/testing/test_support.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::kiln::testing::FlatParameters;
using ::kiln::testing::Quiet;
using ::kiln::testing::RecordingClassifier;
using ::kiln::testing::SmallData;
using ::kiln::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

std::vector<std::string> CheckpointFiles(const std::string& dir) {
  std::vector<std::string> names;
  if (!fs::exists(dir)) return names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Logs a scripted value as `metric` at every validation, so monitoring callbacks see a known sequence.
class ScriptedMetric : public RecordingClassifier {
 public:
  explicit ScriptedMetric(std::vector<double> values) : values_(std::move(values)) {}
  void on_validation_epoch_end() override {
    RecordingClassifier::on_validation_epoch_end();
    // The sanity check also calls this hook; it consumes no scripted value.
    if (hooks.size() > 1 && hooks[hooks.size() - 2] == "on_fit_start") return;
    log("metric", values_.at(std::min(next_++, values_.size() - 1)));
  }

 private:
  std::vector<double> values_;
  size_t next_ = 0;
};

TEST(ModelCheckpointTest, DefaultKeepsTheNewestEpochCheckpoint) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.max_epochs = 3}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  // With the default loggers, checkpoints go into their run folder, as Lightning's do.
  const std::string dir = trainer.options().default_root_dir + "/lightning_logs/version_0/checkpoints";
  EXPECT_EQ(trainer.checkpoint_dir(), dir);
  EXPECT_THAT(CheckpointFiles(dir), ElementsAre("epoch=2-step=30.ckpt"));
  EXPECT_EQ(trainer.checkpoint_callback()->best_model_path(), dir + "/epoch=2-step=30.ckpt");
}

TEST(ModelCheckpointTest, KeepsTheTopKByTheMonitoredMetricAndLast) {
  // Scores per epoch: 5, 3, 4, 1, 2. With mode=min and save_top_k=2 the survivors are epochs 3 (1) and 4 (2).
  ScriptedMetric model({5, 3, 4, 1, 2});
  SyntheticClusters data(SmallData());
  auto checkpoint = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
      .filename = "{epoch}-{metric:.1f}", .monitor = "metric", .save_top_k = 2, .save_last = true});
  Trainer trainer(Quiet({.max_epochs = 5, .callbacks = {checkpoint}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_THAT(CheckpointFiles(checkpoint->dirpath()),
              ElementsAre("epoch=3-metric=1.0.ckpt", "epoch=4-metric=2.0.ckpt", "last.ckpt"));
  EXPECT_EQ(checkpoint->best_model_path(), checkpoint->dirpath() + "/epoch=3-metric=1.0.ckpt");
  EXPECT_EQ(checkpoint->best_model_score(), 1.0);
  EXPECT_EQ(checkpoint->last_model_path(), checkpoint->dirpath() + "/last.ckpt");

  // "best" loads that file for evaluation.
  absl::StatusOr<MetricMap> metrics = trainer.validate(model, data, "best");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
}

TEST(ModelCheckpointTest, ModeMaxEveryNEpochsAndSaveTopKAll) {
  ScriptedMetric model({1, 9, 2, 8});
  SyntheticClusters data(SmallData());
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions{.monitor = "metric", .mode = "max", .save_top_k = -1, .every_n_epochs = 2});
  Trainer trainer(Quiet({.max_epochs = 4, .callbacks = {checkpoint}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_THAT(CheckpointFiles(checkpoint->dirpath()), ElementsAre("epoch=1-step=20.ckpt", "epoch=3-step=40.ckpt"));
  EXPECT_EQ(checkpoint->best_model_score(), 9.0);
}

TEST(ModelCheckpointTest, EveryNTrainStepsAndNoClobberingOfOtherRuns) {
  const std::string root = TempDir();
  for (int run = 0; run < 2; ++run) {
    RecordingClassifier model;
    SyntheticClusters data(SmallData());
    auto checkpoint = std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions{.filename = "fixed", .save_top_k = -1, .every_n_train_steps = 4});
    // No logger: both runs save into root/checkpoints, so that their file names meet.
    Trainer trainer(Quiet({.max_epochs = 1, .default_root_dir = root, .callbacks = {checkpoint}, .logger = false}));
    ASSERT_TRUE(trainer.fit(model, data).ok());
  }
  // Each run saved at steps 4 and 8 under the same template; nothing was overwritten.
  EXPECT_THAT(CheckpointFiles(root + "/checkpoints"),
              ElementsAre("fixed-v1.ckpt", "fixed-v2.ckpt", "fixed-v3.ckpt", "fixed.ckpt"));
}

TEST(ModelCheckpointTest, EnableVersionCounterFalseReplacesTheFileOfTheSameName) {
  const std::string root = TempDir();
  for (int run = 0; run < 2; ++run) {
    RecordingClassifier model;
    SyntheticClusters data(SmallData());
    auto checkpoint = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
        .filename = "fixed", .save_top_k = -1, .every_n_train_steps = 4, .enable_version_counter = false});
    Trainer trainer(Quiet({.max_epochs = 1, .default_root_dir = root, .callbacks = {checkpoint}, .logger = false}));
    ASSERT_TRUE(trainer.fit(model, data).ok());
  }
  // Lightning's enable_version_counter=False: each save replaced the one before, across runs too.
  EXPECT_THAT(CheckpointFiles(root + "/checkpoints"), ElementsAre("fixed.ckpt"));
  absl::StatusOr<Checkpoint> last = ReadCheckpoint(root + "/checkpoints/fixed.ckpt");
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->contents.at("global_step").toInt(), 8);
}

TEST(ModelCheckpointTest, SaveWeightsOnlyWritesAFileThatLoadsButDoesNotResume) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions{.save_top_k = -1, .save_last = true, .save_weights_only = true});
  Trainer trainer(Quiet({.max_epochs = 2, .callbacks = {checkpoint}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  const std::string path = checkpoint->dirpath() + "/epoch=1-step=20.ckpt";
  for (const std::string& file : {path, checkpoint->dirpath() + "/last.ckpt"}) {
    absl::StatusOr<Checkpoint> read = ReadCheckpoint(file);
    ASSERT_TRUE(read.ok()) << read.status();
    std::vector<std::string> keys;
    for (const auto& entry : read->contents) keys.push_back(entry.key().toStringRef());
    // Lightning's weights-only keys (dump_checkpoint(weights_only=True)), and Kiln's section.
    EXPECT_THAT(keys, UnorderedElementsAre("epoch", "global_step", "pytorch-lightning_version", "state_dict", "loops",
                                           "hparams_name", "hyper_parameters", "kiln"))
        << file;
  }
  // validate loads the weights: the metrics are those of the trained model.
  RecordingClassifier fresh;
  absl::StatusOr<MetricMap> loaded = Trainer(Quiet({})).validate(fresh, data, path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(FlatParameters(fresh).equal(FlatParameters(model)));
  // fit refuses to resume from it, naming why and what to do, with the model untouched.
  RecordingClassifier resumed;
  const at::Tensor before = FlatParameters(resumed);
  absl::Status status = Trainer(Quiet({.max_epochs = 3})).fit(resumed, data, path);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("cannot resume training from checkpoint"));
  EXPECT_THAT(status.message(), HasSubstr("save_weights_only=True"));
  EXPECT_TRUE(FlatParameters(resumed).equal(before));
}

TEST(ModelCheckpointTest, SaveOnTrainEpochEndFollowsLightningsRuleOrTheOption) {
  // 10 batches an epoch. Validating twice an epoch, Lightning saves after each validation (steps 5, 10, 15, 20)
  // unless save_on_train_epoch_end says the epoch's end; validating every 2nd epoch, only after those validations.
  struct Case {
    std::optional<bool> on_end;
    std::variant<int64_t, double> val_check_interval;
    int64_t check_val_every_n_epoch;
    std::vector<std::string> files;
  };
  for (const Case& c : std::vector<Case>{
           {std::nullopt, 0.5, 1, {"epoch=0-step=10.ckpt", "epoch=0-step=5.ckpt", "epoch=1-step=15.ckpt",
                                   "epoch=1-step=20.ckpt"}},
           {true, 0.5, 1, {"epoch=0-step=10.ckpt", "epoch=1-step=20.ckpt"}},
           {std::nullopt, 1.0, 2, {"epoch=1-step=20.ckpt"}},
           {true, 1.0, 2, {"epoch=0-step=10.ckpt", "epoch=1-step=20.ckpt"}},
           {false, 1.0, 1, {"epoch=0-step=10.ckpt", "epoch=1-step=20.ckpt"}},
       }) {
    RecordingClassifier model;
    SyntheticClusters data(SmallData());
    auto checkpoint = std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions{.save_top_k = -1, .save_on_train_epoch_end = c.on_end});
    TrainerOptions options = Quiet({.max_epochs = 2, .callbacks = {checkpoint}});
    options.val_check_interval = std::holds_alternative<double>(c.val_check_interval)
                                     ? BatchLimit(std::get<double>(c.val_check_interval))
                                     : BatchLimit(std::get<int64_t>(c.val_check_interval));
    options.check_val_every_n_epoch = c.check_val_every_n_epoch;
    Trainer trainer(options);
    ASSERT_TRUE(trainer.fit(model, data).ok());
    std::vector<std::string> expected = c.files;
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(CheckpointFiles(checkpoint->dirpath()), expected)
        << "save_on_train_epoch_end=" << (c.on_end ? (*c.on_end ? "true" : "false") : "unset")
        << " check_val_every_n_epoch=" << c.check_val_every_n_epoch;
  }
}

TEST(ModelCheckpointTest, TrainTimeIntervalSavesWhenTheTimeHasPassed) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  // Zero: the time has always passed, so every optimizer step saves (and no epoch end does, Lightning's default).
  auto every_step = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions{.filename = "{step}", .save_top_k = -1, .train_time_interval = absl::ZeroDuration()});
  Trainer trainer(Quiet({.max_epochs = 1, .callbacks = {every_step}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(CheckpointFiles(every_step->dirpath()).size(), 10u);
  EXPECT_THAT(every_step->state_key(), HasSubstr("'train_time_interval': datetime.timedelta(0)}"));
  // An hour: no step of this run reaches it.
  RecordingClassifier second;
  auto hourly = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions{.save_top_k = -1, .train_time_interval = absl::Hours(1)});
  Trainer later(Quiet({.max_epochs = 1, .callbacks = {hourly}}));
  ASSERT_TRUE(later.fit(second, data).ok());
  EXPECT_THAT(CheckpointFiles(hourly->dirpath()), ElementsAre());
  EXPECT_THAT(hourly->state_key(), HasSubstr("'train_time_interval': datetime.timedelta(seconds=3600)}"));
  // With another trigger, as Lightning refuses it.
  RecordingClassifier third;
  absl::Status status =
      Trainer(Quiet({.max_epochs = 1,
                     .callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
                         .every_n_epochs = 1, .train_time_interval = absl::Seconds(30)})}}))
          .fit(third, data);
  EXPECT_THAT(status.message(), HasSubstr("should be mutually exclusive"));
}

// Every file under `root`, with its bytes.
std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream file(entry.path(), std::ios::binary);
    files[entry.path().string()] = std::string(std::istreambuf_iterator<char>(file), {});
  }
  return files;
}

TEST(ModelCheckpointTest, ResumingAnotherRunsCheckpointNeverTouchesItsFolder) {
  const auto options = [](const std::string& root, int64_t epochs) {
    auto checkpoint = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.save_top_k = 1, .save_last = true});
    return Quiet({.max_epochs = epochs, .default_root_dir = root, .callbacks = {checkpoint}, .logger = false});
  };
  SyntheticClusters data(SmallData());
  const std::string run_a = TempDir();
  RecordingClassifier first;
  ASSERT_TRUE(Trainer(options(run_a, 2)).fit(first, data).ok());
  const std::map<std::string, std::string> before = Snapshot(run_a);
  ASSERT_EQ(before.size(), 2u) << "epoch=1-step=20.ckpt and last.ckpt";

  const std::string run_b = TempDir();
  RecordingClassifier second;
  Trainer resumed(options(run_b, 4));
  ASSERT_TRUE(resumed.fit(second, data, run_a + "/checkpoints/last.ckpt").ok());
  EXPECT_EQ(Snapshot(run_a), before) << "the other run's files were changed or deleted";
  EXPECT_EQ(resumed.checkpoint_callback()->dirpath(), run_b + "/checkpoints");
  EXPECT_THAT(CheckpointFiles(run_b + "/checkpoints"), ElementsAre("epoch=3-step=40.ckpt", "last.ckpt"));
  EXPECT_EQ(resumed.checkpoint_callback()->best_model_path(), run_b + "/checkpoints/epoch=3-step=40.ckpt");
}

TEST(ModelCheckpointTest, FilenameTemplates) {
  ModelCheckpoint plain(ModelCheckpointOptions{.filename = "{epoch}-{val_loss:.3f}"});
  EXPECT_EQ(plain.FormatFilename(3, 120, {{"val_loss", 0.12345}}), "epoch=3-val_loss=0.123");
  ModelCheckpoint explicit_names(ModelCheckpointOptions{.filename = "epoch={epoch}-val_loss={val_loss:.3f}"});
  EXPECT_EQ(explicit_names.FormatFilename(3, 120, {{"val_loss", 0.12345}}), "epoch=3-val_loss=0.123");
  ModelCheckpoint raw(ModelCheckpointOptions{.filename = "model_{epoch:03d}_{step}", .auto_insert_metric_name = false});
  EXPECT_EQ(raw.FormatFilename(7, 42, {}), "model_007_42");
  ModelCheckpoint missing(ModelCheckpointOptions{.filename = "{acc:.2f}"});
  EXPECT_EQ(missing.FormatFilename(0, 0, {}), "acc=0.00");
}

TEST(ModelCheckpointTest, ConfigurationErrorsAndAMetricThatWasNeverLogged) {
  struct Case {
    ModelCheckpointOptions options;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{.mode = "mid"}, "ModelCheckpoint(mode='mid') is not valid; use 'min' or 'max'"},
           {{.save_top_k = 3}, "ModelCheckpoint(save_top_k=3, monitor=None) is not a valid configuration"},
           {{.save_top_k = -2}, "Invalid value for save_top_k=-2"},
       }) {
    RecordingClassifier model;
    SyntheticClusters data(SmallData());
    Trainer trainer(Quiet({.max_epochs = 1, .callbacks = {std::make_shared<ModelCheckpoint>(c.options)}}));
    EXPECT_THAT(trainer.fit(model, data).message(), HasSubstr(c.message));
    EXPECT_EQ(model.training_steps, 0);
  }
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(
      Quiet({.max_epochs = 3,
             .callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.monitor = "val_los"})}}));
  absl::Status status = trainer.fit(model, data);
  EXPECT_THAT(status.message(), HasSubstr("`ModelCheckpoint(monitor='val_los')` could not find the monitored key in "
                                          "the returned metrics: "));
  EXPECT_THAT(status.message(), HasSubstr("`val_loss`"));
  EXPECT_EQ(model.training_steps, 10) << "the run must stop at the first epoch end";
  EXPECT_THAT(Trainer(Quiet({.callbacks = {std::make_shared<ModelCheckpoint>()}, .enable_checkpointing = false}))
                  .fit(model, data)
                  .message(),
              HasSubstr("`enable_checkpointing=False` but found `ModelCheckpoint`"));
}

struct StopCase {
  std::string name;
  EarlyStoppingOptions options;
  std::vector<double> values;
  std::optional<int64_t> min_epochs;
  int64_t expected_epochs;
  std::string reason_part;
};

TEST(EarlyStoppingTest, StopsWhenLightningWould) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<StopCase> cases = {
      {"patience",
       {.monitor = "metric", .patience = 2},
       {5, 4, 4, 4, 1},
       std::nullopt,
       4,
       "Monitored metric metric did not improve in the last 2 records. Best score: 4.000"},
      {"min_delta",
       {.monitor = "metric", .min_delta = 0.5, .patience = 1},
       {5, 4.8, 1},
       std::nullopt,
       2,
       "did not improve in the last 1 records. Best score: 5.000"},
      {"improving never stops", {.monitor = "metric", .patience = 1}, {5, 4, 3, 2, 1}, std::nullopt, 5, ""},
      {"mode max",
       {.monitor = "metric", .patience = 1, .mode = "max"},
       {1, 2, 1},
       std::nullopt,
       3,
       "Best score: 2.000"},
      {"min_epochs", {.monitor = "metric", .patience = 1}, {5, 5, 5, 5, 5, 5}, 4, 4, "did not improve"},
      {"not finite",
       {.monitor = "metric"},
       {5, nan},
       std::nullopt,
       2,
       "Monitored metric metric = nan is not finite. Previous best value was 5.000"},
      {"stopping threshold",
       {.monitor = "metric", .stopping_threshold = 2.0},
       {5, 3, 1.5, 1},
       std::nullopt,
       3,
       "Stopping threshold reached: metric = 1.5 < 2"},
      {"divergence threshold",
       {.monitor = "metric", .divergence_threshold = 10.0},
       {5, 11, 1},
       std::nullopt,
       2,
       "Divergence threshold reached: metric = 11 > 10"},
  };
  for (const StopCase& c : cases) {
    SCOPED_TRACE(c.name);
    ScriptedMetric model(c.values);
    SyntheticClusters data(SmallData());
    auto stopping = std::make_shared<EarlyStopping>(c.options);
    Trainer trainer(Quiet(
        {.max_epochs = static_cast<int64_t>(c.values.size()), .min_epochs = c.min_epochs, .callbacks = {stopping}}));
    ASSERT_TRUE(trainer.fit(model, data).ok());
    EXPECT_EQ(trainer.current_epoch(), c.expected_epochs);
    if (c.reason_part.empty()) {
      EXPECT_EQ(stopping->stop_reason(), "");
    } else {
      EXPECT_THAT(stopping->stop_reason(), HasSubstr(c.reason_part));
    }
  }
}

TEST(EarlyStoppingTest, StrictMissingMetricIsAnError) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet(
      {.max_epochs = 3, .callbacks = {std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "nope"})}}));
  EXPECT_THAT(trainer.fit(model, data).message(),
              HasSubstr("Early stopping conditioned on metric `nope` which is not available. Pass in or modify your "
                        "`EarlyStopping` callback to use any of the following: "));
  Trainer no_monitor(Quiet({.callbacks = {std::make_shared<EarlyStopping>(EarlyStoppingOptions{})}}));
  EXPECT_THAT(no_monitor.fit(model, data).message(), HasSubstr("EarlyStopping needs a metric to monitor"));
}

TEST(MonitorsTest, LearningRateAndDeviceStatsGoToTheLogger) {
  RecordingClassifier model(MlpOptions{.learning_rate = 0.005});
  SyntheticClusters data(SmallData());
  auto logger = std::make_shared<MemoryLogger>();
  Trainer trainer(Quiet({.max_epochs = 1,
                         .log_every_n_steps = 5,
                         .callbacks = {std::make_shared<LearningRateMonitor>(), std::make_shared<DeviceStatsMonitor>()},
                         .loggers = {logger}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  int lr_rows = 0;
  int stats_rows = 0;
  for (const MemoryLogger::Row& row : logger->rows()) {
    if (row.metrics.count("lr-Adam")) {
      ++lr_rows;
      EXPECT_DOUBLE_EQ(row.metrics.at("lr-Adam"), 0.005);
    }
    if (row.metrics.count("DeviceStatsMonitor.on_train_batch_end/process_rss_bytes")) {
      ++stats_rows;
      EXPECT_GT(row.metrics.at("DeviceStatsMonitor.on_train_batch_end/process_rss_bytes"), 0);
    }
  }
  // 10 steps, logging every 5: the learning rate at steps 0 and 5 (before the batch), statistics at steps 5, 10.
  EXPECT_EQ(lr_rows, 2);
  EXPECT_EQ(stats_rows, 2);

  for (const std::shared_ptr<Callback>& monitor : std::vector<std::shared_ptr<Callback>>{
           std::make_shared<LearningRateMonitor>(), std::make_shared<DeviceStatsMonitor>()}) {
    Trainer without_logger(Quiet({.callbacks = {monitor}, .logger = false}));
    EXPECT_THAT(without_logger.fit(model, data).message(), HasSubstr("callback with"));
  }
}

// A backend whose devices all compute on the host CPU: the monitor asks for this process's device by the
// accelerator's own index (the fake reports it as device_index), not for "cpu".
TEST(MonitorsTest, DeviceStatsAreTheLogicalDevices) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  auto logger = std::make_shared<MemoryLogger>();
  auto simulator = std::make_shared<::kiln::testing::FakeAccelerator>(
      ::kiln::testing::FakeAcceleratorOptions{.name = "simulator", .device_count = 3});
  Trainer trainer(Quiet({.accelerator = simulator,
                         .devices = std::vector<int>{2},
                         .max_epochs = 1,
                         .log_every_n_steps = 5,
                         .callbacks = {std::make_shared<DeviceStatsMonitor>()},
                         .loggers = {logger}}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(trainer.plan()->root_logical_device().ToString(), "simulator:2 (on cpu)");
  int rows = 0;
  for (const MemoryLogger::Row& row : logger->rows()) {
    if (!row.metrics.count("DeviceStatsMonitor.on_train_batch_end/device_index")) continue;
    ++rows;
    EXPECT_EQ(row.metrics.at("DeviceStatsMonitor.on_train_batch_end/device_index"), 2.0);
  }
  EXPECT_EQ(rows, 2);
}

TEST(TimerTest, MaxTimeStopsTraining) {
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  // A budget shorter than any step: the Timer stops training after the first batch.
  Trainer trainer(Quiet({.max_epochs = 5, .max_time = absl::Nanoseconds(1)}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  EXPECT_EQ(model.training_steps, 1);
}

// Throws after `crash_step` optimizer steps, like a process dying mid-epoch.
class CrashAt : public Callback {
 public:
  explicit CrashAt(int64_t step) : step_(step) {}
  std::string state_key() const override { return "CrashAt"; }
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override {
    if (trainer.global_step() == step_) throw std::runtime_error("simulated crash");
  }

 private:
  int64_t step_;
};

TEST(ResumeTest, ResumingFromTheLastCheckpointMatchesAnUninterruptedRunExactly) {
  const auto make_options = [](const std::string& root, std::vector<std::shared_ptr<Callback>> extra) {
    auto checkpoint = std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions{.save_top_k = 1, .save_last = true, .every_n_train_steps = 7});
    extra.insert(extra.begin(), checkpoint);
    return Quiet({.max_epochs = 3, .default_root_dir = root, .callbacks = extra});
  };
  torch::manual_seed(11);
  RecordingClassifier reference;
  SyntheticClusters data(SmallData());
  Trainer uninterrupted(make_options(TempDir(), {}));
  ASSERT_TRUE(uninterrupted.fit(reference, data).ok());

  const std::string root = TempDir();
  torch::manual_seed(11);
  RecordingClassifier crashed;
  Trainer first(make_options(root, {std::make_shared<CrashAt>(17)}));
  EXPECT_THAT(first.fit(crashed, data).message(), HasSubstr("simulated crash"));

  torch::manual_seed(999);  // A different start: everything must come from the checkpoint.
  RecordingClassifier resumed;
  Trainer second(make_options(root, {}));
  ASSERT_TRUE(second.fit(resumed, data, "last").ok());
  EXPECT_EQ(second.resumed_from(), root + "/lightning_logs/version_0/checkpoints/last.ckpt");
  EXPECT_EQ(resumed.training_steps, 30 - 14) << "resumed at the checkpoint of step 14, mid-epoch 1";
  EXPECT_EQ(second.global_step(), 30);
  EXPECT_TRUE(FlatParameters(resumed).equal(FlatParameters(reference)))
      << "parameters differ from the uninterrupted run";
}

TEST(ResumeTest, ABadCheckpointIsRefusedAndTheModelIsUntouched) {
  const std::string root = TempDir();
  RecordingClassifier model;
  SyntheticClusters data(SmallData());
  Trainer trainer(Quiet({.max_epochs = 1, .default_root_dir = root}));
  ASSERT_TRUE(trainer.fit(model, data).ok());
  const std::string good = root + "/lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt";
  ASSERT_TRUE(fs::exists(good));

  RecordingClassifier other(MlpOptions{.hidden_sizes = {32}});  // Different shapes.
  const at::Tensor before = FlatParameters(other);
  Trainer refuse(Quiet({.max_epochs = 2}));
  absl::Status status = refuse.fit(other, data, good);
  EXPECT_THAT(status.message(), HasSubstr("cannot restore from checkpoint " + good));
  EXPECT_TRUE(FlatParameters(other).equal(before));
  EXPECT_EQ(other.training_steps, 0);

  EXPECT_THAT(Trainer(Quiet({})).fit(model, data, root + "/nope.ckpt").message(), HasSubstr("does not exist"));
  EXPECT_THAT(Trainer(Quiet({})).fit(model, data, "best").message(), HasSubstr("ckpt_path=\"best\" but no"));
  // "last" with only damaged files to resume from is an error; with no checkpoint at all, a fresh start (as
  // Lightning's ckpt_path="last").
  const std::string damaged = TempDir();
  kiln::testing::Overwrite(damaged + "/last.ckpt", "half a checkpoint");
  EXPECT_THAT(Trainer(Quiet({.default_root_dir = damaged})).fit(model, data, "last").message(),
              HasSubstr("found no complete checkpoint under " + damaged + ": the 1 .ckpt file(s) there are damaged"));
  Trainer fresh(Quiet({.max_epochs = 1}));
  ASSERT_TRUE(fresh.fit(model, data, "last").ok());
  EXPECT_TRUE(fresh.resumed_from().empty());
  EXPECT_EQ(fresh.current_epoch(), 1);
}

}  // namespace
}  // namespace kiln
