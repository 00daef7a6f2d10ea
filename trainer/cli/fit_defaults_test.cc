// `fit` with no flags and `TrainerOptions{}` train the same way: the library's defaults are the command line's
// (and Lightning's), field by field. The two places where they differ on purpose are named below.
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/cli/fit_config.h"
#include "trainer/cli/flags.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;

std::string Text(const std::optional<double>& value) { return value.has_value() ? std::to_string(*value) : "unset"; }

TEST(FitDefaultsTest, FitWithNoFlagsIsTrainerOptionsDefaults) {
  absl::StatusOr<FitConfig> config = FitConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  const TrainerOptions& fit = config->trainer;
  const TrainerOptions library;
  EXPECT_EQ(fit.accelerator.name(), library.accelerator.name());
  EXPECT_EQ(fit.devices.ToString(), library.devices.ToString());
  EXPECT_EQ(fit.strategy.name(), library.strategy.name());
  EXPECT_EQ(fit.process_group_timeout, library.process_group_timeout);
  EXPECT_EQ(fit.process_group_backend, library.process_group_backend);
  EXPECT_EQ(fit.sync_batchnorm, library.sync_batchnorm);
  EXPECT_EQ(fit.precision, library.precision);
  EXPECT_EQ(fit.num_nodes, library.num_nodes);
  EXPECT_EQ(fit.min_epochs.value_or(0), library.min_epochs.value_or(0));
  EXPECT_EQ(fit.max_steps, library.max_steps);
  EXPECT_EQ(fit.max_time.has_value(), library.max_time.has_value());
  EXPECT_EQ(fit.limit_train_batches.ToString(), library.limit_train_batches.ToString());
  EXPECT_EQ(fit.limit_val_batches.ToString(), library.limit_val_batches.ToString());
  EXPECT_EQ(fit.limit_test_batches.ToString(), library.limit_test_batches.ToString());
  EXPECT_EQ(fit.limit_predict_batches.ToString(), library.limit_predict_batches.ToString());
  EXPECT_EQ(fit.val_check_interval.ToString(), library.val_check_interval.ToString());
  EXPECT_EQ(fit.check_val_every_n_epoch, library.check_val_every_n_epoch);
  EXPECT_EQ(fit.num_sanity_val_steps, library.num_sanity_val_steps);
  EXPECT_EQ(fit.accumulate_grad_batches, library.accumulate_grad_batches);
  // fit's --gradient_clip_val=0 and the library's unset both mean no clipping.
  EXPECT_EQ(fit.gradient_clip_val.value_or(0), library.gradient_clip_val.value_or(0)) << Text(fit.gradient_clip_val);
  EXPECT_EQ(fit.gradient_clip_algorithm, library.gradient_clip_algorithm);
  EXPECT_EQ(fit.log_every_n_steps, library.log_every_n_steps);
  EXPECT_EQ(fit.fast_dev_run, library.fast_dev_run);
  EXPECT_EQ(fit.overfit_batches.ToString(), library.overfit_batches.ToString());
  EXPECT_EQ(fit.deterministic, library.deterministic);
  EXPECT_EQ(fit.on_nonfinite_loss, library.on_nonfinite_loss);
  EXPECT_EQ(fit.enable_checkpointing, library.enable_checkpointing);
  EXPECT_EQ(fit.enable_progress_bar, library.enable_progress_bar);
  EXPECT_EQ(fit.enable_model_summary, library.enable_model_summary);
  // The loggers: the library's logger=true makes a CsvLogger and a TensorBoardLogger; fit makes the same two from
  // --logger (it passes logger=false only because it builds them itself, to share its run folder with the report).
  EXPECT_TRUE(library.logger);
  EXPECT_TRUE(library.loggers.empty());
  EXPECT_THAT(config->outputs.loggers, ElementsAre("csv", "tensorboard"));
  EXPECT_EQ(config->outputs.log_dir.name, "lightning_logs");
  EXPECT_FALSE(config->outputs.log_dir.version.has_value());

  // On purpose: fit trains 10 epochs unless told (the library, like Lightning, 1000 with a warning), and seeds
  // with --seed=42 (the library, like Lightning, seeds only when asked).
  EXPECT_EQ(fit.max_epochs, std::optional<int64_t>(10));
  EXPECT_FALSE(library.max_epochs.has_value());
  EXPECT_EQ(fit.seed, std::optional<uint64_t>(42));
  EXPECT_FALSE(library.seed.has_value());
}

// The weight-averaging callbacks' flags, once each callback is on, are their options structs' defaults (Lightning's).
TEST(FitDefaultsTest, WeightAveragingFlagsAreTheCallbacksDefaults) {
  absl::SetFlag(&FLAGS_swa_lrs, "0.01");
  absl::SetFlag(&FLAGS_ema_weight_averaging, true);
  absl::StatusOr<FitConfig> config = FitConfigFromFlags();
  absl::SetFlag(&FLAGS_swa_lrs, "");
  absl::SetFlag(&FLAGS_ema_weight_averaging, false);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->outputs.swa.has_value());
  const StochasticWeightAveragingOptions& swa = *config->outputs.swa;
  const StochasticWeightAveragingOptions swa_library;
  EXPECT_THAT(swa.swa_lrs, ElementsAre(0.01));
  EXPECT_EQ(swa.swa_epoch_start, swa_library.swa_epoch_start);
  EXPECT_EQ(swa.annealing_epochs, swa_library.annealing_epochs);
  EXPECT_EQ(swa.annealing_strategy, swa_library.annealing_strategy);
  EXPECT_EQ(swa.device, swa_library.device);
  EXPECT_FALSE(static_cast<bool>(swa.avg_fn));
  ASSERT_TRUE(config->outputs.ema.has_value());
  const EMAWeightAveragingOptions& ema = *config->outputs.ema;
  const EMAWeightAveragingOptions ema_library;
  EXPECT_EQ(ema.decay, ema_library.decay);
  EXPECT_EQ(ema.update_every_n_steps, ema_library.update_every_n_steps);
  EXPECT_EQ(ema.update_starting_at_step, ema_library.update_starting_at_step);
  EXPECT_EQ(ema.update_starting_at_epoch, ema_library.update_starting_at_epoch);
  EXPECT_EQ(ema.use_buffers, ema_library.use_buffers);
  EXPECT_EQ(ema.device, ema_library.device);
}

TEST(FitDefaultsTest, NoWeightAveragingWithoutItsFlags) {
  absl::StatusOr<FitConfig> config = FitConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->outputs.swa.has_value());
  EXPECT_FALSE(config->outputs.ema.has_value());
}

}  // namespace
}  // namespace kiln
