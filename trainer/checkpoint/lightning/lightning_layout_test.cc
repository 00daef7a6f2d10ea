// Lightning's loops and callback states (lightning_layout.h). The relations checked are the ones Lightning 2.x's
// loops read to decide where a resumed run stands (loops/fit_loop.py and training_epoch_loop.py,
// update_restart_stage); tests/lightning resumes real files in real Lightning.
#include "trainer/checkpoint/lightning/lightning_layout.h"

#include <string>

#include "ATen/ATen.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using c10::impl::GenericDict;

GenericDict At(const GenericDict& dict, const std::string& key) {
  EXPECT_TRUE(dict.contains(key)) << key;
  return dict.at(key).toGenericDict();
}

int64_t Count(const GenericDict& tracker, const std::string& part, const std::string& name) {
  return At(tracker, part).at(name).toInt();
}

TEST(LightningLoopsTest, EpochEndReadsAsResumedOnEpochEnd) {
  const LightningCounters counters{.batches_total = 8, .batches_completed = 4, .batches_that_stepped = 8,
                                   .steps_in_epoch = 4, .scheduler_steps_in_epoch = 1, .val_batches_in_epoch = 2,
                                   .val_batches_last_run = 2};
  const GenericDict loops = LightningLoops(
      {.current_epoch = 1, .epoch_ended = true, .batches_done = 4, .global_step = 8}, counters, /*scheduler_steps=*/2);
  for (const char* loop : {"fit_loop", "validate_loop", "test_loop", "predict_loop"}) EXPECT_TRUE(loops.contains(loop));
  const GenericDict fit = At(loops, "fit_loop");
  const GenericDict epochs = At(fit, "epoch_progress");
  // Every epoch begun has been processed; the last is not completed: Lightning's "resumed on epoch end", which
  // completes it and starts epoch 2.
  EXPECT_EQ(Count(epochs, "total", "ready"), 2);
  EXPECT_EQ(Count(epochs, "total", "started"), 2);
  EXPECT_EQ(Count(epochs, "total", "processed"), 2);
  EXPECT_EQ(Count(epochs, "total", "completed"), 1);
  const GenericDict batches = At(fit, "epoch_loop.batch_progress");
  EXPECT_EQ(Count(batches, "current", "completed"), 4);
  EXPECT_EQ(Count(batches, "total", "completed"), 8);
  EXPECT_TRUE(batches.at("is_last_batch").toBool());
  const GenericDict step = At(At(At(fit, "epoch_loop.automatic_optimization.optim_progress"), "optimizer"), "step");
  EXPECT_EQ(Count(step, "total", "completed"), 8);  // Lightning's global_step.
  EXPECT_EQ(Count(step, "current", "completed"), 4);
  EXPECT_EQ(At(fit, "epoch_loop.state_dict").at("_batches_that_stepped").toInt(), 8);
  EXPECT_EQ(Count(At(fit, "epoch_loop.scheduler_progress"), "total", "completed"), 2);
  EXPECT_EQ(Count(At(fit, "epoch_loop.val_loop.batch_progress"), "current", "completed"), 2);
}

TEST(LightningLoopsTest, MidEpochInBatchEndHooksReadsAsRestartedOnTrainBatchEnd) {
  // Saved from on_train_batch_end of the third batch of epoch 1 (7 batches in all): that batch is not completed.
  const LightningCounters counters{.batches_total = 7, .batches_completed = 2, .batches_that_stepped = 6,
                                   .steps_in_epoch = 3};
  const GenericDict fit = At(
      LightningLoops({.current_epoch = 1, .epoch_ended = false, .batches_done = 3, .global_step = 7}, counters, 0),
      "fit_loop");
  const GenericDict epochs = At(fit, "epoch_progress");
  // Started but not processed: Lightning's "restarted mid epoch".
  EXPECT_EQ(Count(epochs, "total", "started"), 2);
  EXPECT_EQ(Count(epochs, "total", "processed"), 1);
  EXPECT_EQ(Count(epochs, "total", "completed"), 1);
  const GenericDict batches = At(fit, "epoch_loop.batch_progress");
  // completed == processed - 1: Lightning completes the batch rather than running it again.
  EXPECT_EQ(Count(batches, "total", "processed"), 7);
  EXPECT_EQ(Count(batches, "total", "completed"), 6);
  EXPECT_EQ(Count(batches, "current", "ready"), 3);
  EXPECT_EQ(Count(batches, "current", "completed"), 2);
  EXPECT_FALSE(batches.at("is_last_batch").toBool());
}

TEST(LightningLoopsTest, CountersComeBack) {
  const LightningCounters counters{.batches_total = 11, .batches_completed = 3, .batches_that_stepped = 5,
                                   .steps_in_epoch = 3, .scheduler_steps_in_epoch = 3, .val_batches_in_epoch = 4,
                                   .val_batches_last_run = 2};
  const LightningLoopPosition position{.current_epoch = 2, .epoch_ended = false, .batches_done = 3, .global_step = 9};
  GenericDict checkpoint(c10::StringType::get(), c10::AnyType::get());
  checkpoint.insert("loops", LightningLoops(position, counters, 9));
  const LightningCounters read = ReadLightningCounters(checkpoint, position);
  EXPECT_EQ(read.batches_total, 11);
  EXPECT_EQ(read.batches_completed, 3);
  EXPECT_EQ(read.steps_in_epoch, 3);
  EXPECT_EQ(read.scheduler_steps_in_epoch, 3);
  EXPECT_EQ(read.val_batches_in_epoch, 4);
  EXPECT_EQ(read.val_batches_last_run, 2);
  // An older file without them: derived from the position.
  const LightningCounters derived =
      ReadLightningCounters(GenericDict(c10::StringType::get(), c10::AnyType::get()), position);
  EXPECT_EQ(derived.batches_total, 3);
  EXPECT_EQ(derived.steps_in_epoch, 3);
}

TEST(LightningLoopsTest, IsFortyFourAnyTypedDictionaries) {
  const GenericDict loops =
      LightningLoops({.current_epoch = 1, .epoch_ended = false, .batches_done = 3, .global_step = 7},
                     LightningCounters{}, /*scheduler_steps=*/0);
  int dictionaries = 0;
  int narrow = 0;
  c10::IValue(loops).visit([&](const c10::IValue& item) {
    if (item.isGenericDict()) {
      ++dictionaries;
      const GenericDict dict = item.toGenericDict();
      narrow += dict.keyType()->kind() != c10::TypeKind::AnyType || dict.valueType()->kind() != c10::TypeKind::AnyType;
    }
    narrow += item.isList();  // Lightning's loops hold no lists.
    return false;
  });
  // The epoch progress's "total" and "current" are one dictionary (visited twice), as they always were.
  EXPECT_EQ(dictionaries, 45);
  EXPECT_EQ(narrow, 0);
}

TEST(LightningCallbackStateTest, ModelCheckpointTakesLightningsTypesAndComesBack) {
  const std::string key =
      "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, "
      "'train_time_interval': None}";
  const CallbackState state = {{"best_model_path", "a.ckpt"},
                               {"best_model_score", "0.25"},
                               {"best_k_models", "a.ckpt\t0.25\nb.ckpt\t0.5\n"},
                               {"last_saved_step", "8"}};
  const GenericDict typed = LightningCallbackState(key, state);
  EXPECT_TRUE(typed.at("best_model_score").isTensor());
  EXPECT_EQ(typed.at("best_model_score").toTensor().item<double>(), 0.25);
  EXPECT_TRUE(typed.at("best_k_models").isGenericDict());
  EXPECT_EQ(typed.at("best_k_models").toGenericDict().at("b.ckpt").toTensor().item<double>(), 0.5);
  EXPECT_EQ(typed.at("last_saved_step").toInt(), 8);
  EXPECT_EQ(typed.at("best_model_path").toStringRef(), "a.ckpt");
  const CallbackState back = KilnCallbackState(key, typed);
  EXPECT_EQ(back.at("best_model_path"), "a.ckpt");
  EXPECT_EQ(back.at("best_model_score"), "0.25");
  EXPECT_EQ(back.at("best_k_models"), "a.ckpt\t0.25\nb.ckpt\t0.5\n");
  EXPECT_EQ(back.at("last_saved_step"), "8");
}

TEST(LightningCallbackStateTest, EarlyStoppingAndTimer) {
  const std::string key = "EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}";
  const GenericDict typed = LightningCallbackState(
      key, {{"wait_count", "2"}, {"stopped_epoch", "0"}, {"best_score", "0.125"}, {"patience", "3"}});
  EXPECT_EQ(typed.at("wait_count").toInt(), 2);
  EXPECT_TRUE(typed.at("best_score").isTensor());
  EXPECT_EQ(KilnCallbackState(key, typed).at("best_score"), "0.125");
  const GenericDict timer = LightningCallbackState("Timer", {{"time_elapsed_seconds", "12.5"}});
  EXPECT_EQ(timer.at("time_elapsed").toGenericDict().at("train").toDouble(), 12.5);
  EXPECT_EQ(KilnCallbackState("Timer", timer), (CallbackState{{"time_elapsed_seconds", "12.5"}}));
}

TEST(LightningCallbackStateTest, RefusesWhatIsNotTextOrANumber) {
  GenericDict bad(c10::StringType::get(), c10::AnyType::get());
  bad.insert("x", c10::IValue(std::vector<int64_t>{1, 2}));
  EXPECT_THROW(KilnCallbackState("Mine", bad), c10::Error);
  EXPECT_THROW(KilnCallbackState("Mine", c10::IValue(3)), c10::Error);
}

TEST(CurrentStateKeyTest, AddsTrainTimeIntervalToKilnsEarlierModelCheckpointKey) {
  EXPECT_EQ(CurrentStateKey("ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, "
                            "'every_n_epochs': 1}"),
            "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, "
            "'train_time_interval': None}");
  const std::string current = CurrentStateKey("ModelCheckpoint{'monitor': None, 'train_time_interval': None}");
  EXPECT_EQ(current, "ModelCheckpoint{'monitor': None, 'train_time_interval': None}");
  EXPECT_EQ(CurrentStateKey("Timer"), "Timer");
}

}  // namespace
}  // namespace kiln
