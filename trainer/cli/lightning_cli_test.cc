#include "trainer/cli/lightning_cli.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::vector<std::string> Translate(std::vector<std::string> args, std::vector<std::string>* notes = nullptr) {
  std::vector<std::string> ignored;
  args.insert(args.begin(), "fit");
  absl::StatusOr<std::vector<std::string>> out = LightningCliArguments(args, notes != nullptr ? notes : &ignored);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? std::vector<std::string>(out->begin() + 1, out->end()) : std::vector<std::string>{};
}

std::string Error(std::vector<std::string> args) {
  std::vector<std::string> notes;
  args.insert(args.begin(), "fit");
  absl::StatusOr<std::vector<std::string>> out = LightningCliArguments(args, &notes);
  EXPECT_FALSE(out.ok());
  return std::string(out.status().message());
}

TEST(LightningCliTest, SectionsBecomeFitsFlags) {
  EXPECT_THAT(Translate({"--trainer.max_epochs=3", "--trainer.accelerator", "cpu", "--model.hidden_sizes=32,32",
                         "--data.batch_size=128", "--trainer.logger=csv"}),
              ElementsAre("--max_epochs=3", "--accelerator=cpu", "--hidden_sizes=32,32", "--batch_size=128",
                          "--logger=csv"));
  EXPECT_THAT(Translate({"--trainer.sync_batchnorm=true"}), ElementsAre("--sync_batchnorm=true"));
  // The config file's keys: ModelCheckpoint's monitor is not the Trainer's, and lr_scheduler's are PyTorch's.
  EXPECT_THAT(Translate({"--lr_scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau", "--lr_scheduler.monitor=val_loss",
                         "--lr_scheduler.init_args.factor=0.5", "--lr_scheduler.patience=2"}),
              ElementsAre("--lr_scheduler=plateau", "--lr_scheduler_monitor=val_loss", "--plateau_factor=0.5",
                          "--plateau_patience=2"));
}

TEST(LightningCliTest, OptimizerAndSeedAsLightningWritesThem) {
  EXPECT_THAT(Translate({"--optimizer=torch.optim.SGD", "--optimizer.lr=0.1", "--optimizer.init_args.lr=0.2",
                         "--seed_everything=7"}),
              ElementsAre("--optimizer=sgd", "--learning_rate=0.1", "--learning_rate=0.2", "--seed=7"));
  std::vector<std::string> notes;
  const std::vector<std::string> drawn = Translate({"--seed_everything=true"}, &notes);
  ASSERT_EQ(drawn.size(), 1u);
  EXPECT_THAT(drawn[0], MatchesRegex("--seed=[0-9]+"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("pass " + drawn[0] + " to repeat it"));
}

TEST(LightningCliTest, TheSubcommandIsTheMode) {
  EXPECT_THAT(Translate({"validate", "--ckpt_path=last"}), ElementsAre("--mode=validate", "--ckpt_path=last"));
  EXPECT_THAT(Translate({"fit", "--mode=fit"}), ElementsAre("--mode=fit", "--mode=fit"));
  EXPECT_THAT(Error({"predict", "--mode=fit"}), HasSubstr("the subcommand 'predict' and --mode=fit disagree"));
  EXPECT_THAT(Error({"predict", "--mode", "fit"}), HasSubstr("the subcommand 'predict' and --mode=fit disagree"));
  // Elsewhere a word is no subcommand: fit's own check refuses it as an unexpected argument.
  EXPECT_THAT(Translate({"--max_epochs=2", "validate"}), ElementsAre("--max_epochs=2", "validate"));
}

TEST(LightningCliTest, FitsOwnFlagsPassUnchanged) {
  EXPECT_THAT(Translate({"--max_epochs=2", "--learning_rate", "0.1", "--optimizer_x=1"}),
              ElementsAre("--max_epochs=2", "--learning_rate", "0.1", "--optimizer_x=1"));
  // fit's own --optimizer and --lr_scheduler values (and mistakes in them, which fit's check words) stay as given.
  EXPECT_THAT(Translate({"--optimizer=adam", "--lr_scheduler", "cosine", "--optimizer=adamw"}),
              ElementsAre("--optimizer=adam", "--lr_scheduler", "cosine", "--optimizer=adamw"));
}

TEST(LightningCliTest, ClassArgumentsAreFitsFlags) {
  EXPECT_THAT(Translate({"--optimizer=SGD", "--optimizer.momentum=0.5", "--optimizer.init_args.weight_decay=0.01",
                         "--lr_scheduler=ReduceLROnPlateau", "--lr_scheduler.factor=0.5"}),
              ElementsAre("--optimizer=sgd", "--momentum=0.5", "--weight_decay=0.01", "--lr_scheduler=plateau",
                          "--plateau_factor=0.5"));
}

// trainer.profiler as LightningCLI's command line names a profiler object: the class, then its init arguments.
TEST(LightningCliTest, AProfilerClassAndItsArgumentsAreFitsFlags) {
  EXPECT_THAT(Translate({"--trainer.profiler=SimpleProfiler", "--trainer.profiler.dirpath=prof",
                         "--trainer.profiler.init_args.filename=perf"}),
              ElementsAre("--profiler=simple", "--profiler_dirpath=prof", "--profiler_filename=perf"));
  EXPECT_THAT(Translate({"--trainer.profiler.class_path=lightning.pytorch.profilers.PyTorchProfiler",
                         "--trainer.profiler=advanced"}),
              ElementsAre("--profiler=pytorch", "--profiler=advanced"));
  EXPECT_THAT(Error({"--trainer.profiler.class_path=XLAProfiler"}),
              HasSubstr("not a profiler Kiln has; pass SimpleProfiler, AdvancedProfiler, PyTorchProfiler"));
  EXPECT_THAT(Error({"--trainer.profiler.row_limit=5"}), HasSubstr("Kiln's profilers take dirpath, filename"));
}

TEST(LightningCliTest, MistakesSayWhatToWrite) {
  EXPECT_THAT(Error({"--trainer.max_epoch=3"}), HasSubstr("unknown flag --trainer.max_epoch; did you mean "
                                                           "--trainer.max_epochs?"));
  EXPECT_THAT(Error({"--optimizer=RMSprop"}), HasSubstr("not an optimizer Kiln has; pass Adam, AdamW, SGD"));
  EXPECT_THAT(Error({"--optimizer.betas=[0.8,0.9]"}), HasSubstr("Kiln's optimizers take lr, weight_decay, momentum"));
  EXPECT_THAT(Error({"--lr_scheduler=CyclicLR"}), HasSubstr("not a scheduler Kiln has"));
  EXPECT_THAT(Error({"--trainer.callbacks+=EarlyStopping"}), HasSubstr("callbacks on the command line"));
  EXPECT_THAT(Error({"--trainer.max_epochs"}), HasSubstr("--trainer.max_epochs needs a value"));
}

}  // namespace
}  // namespace kiln
